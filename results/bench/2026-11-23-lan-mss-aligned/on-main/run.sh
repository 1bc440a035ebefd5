#!/bin/bash
# The aligned LAN MSS with its delayed-ACK cap (branch lan-mss-aligned, 77e3fdd,
# cherry-picked onto main at 43b6eaf) against main at 43b6eaf, five alternating
# rounds on fresh paper labs (20 bordeaux nodes), Open MPI, 4/12/20 senders x
# 10K/100K/1M, --budget 1. OLD/NEW: the two gridsplitd binaries.
DIR="$(cd "$(dirname "$0")" && pwd)" ROUNDS=5 exec "$(dirname "$0")/../run.sh"
