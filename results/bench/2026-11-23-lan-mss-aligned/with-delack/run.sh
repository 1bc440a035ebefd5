#!/bin/bash
# The aligned LAN MSS again, now with its delayed-ACK cap (gridsplitd offers
# 1420 and caps LAN delayed ACKs at 5 ms when [lan] mss and delack_max_us are
# unset) against gridsplitd at 0f4dcde. Alternating rounds on fresh paper labs
# (20 bordeaux nodes), Open MPI, 4/12/20 senders x 10K/100K/1M, --budget 1.
# OLD/NEW: the two gridsplitd binaries.
# Two rounds of ../run.sh's loop, written here.
DIR="$(cd "$(dirname "$0")" && pwd)" ROUNDS=2 exec "$(dirname "$0")/../run.sh"
