# Idle-state A/B (idle.sh): ping-pong half round trip and 1K gathers per gather, direct and split,
# with the vCPUs allowed to halt when idle (default) and kept polling (PM QoS 0 µs).
# Medians of the rounds (min-max). Usage: python3 THIS FILE
import json, os, statistics as st
from collections import defaultdict
D = os.path.dirname(os.path.abspath(__file__))
def rows(f):
    return [json.loads(l) for l in open(os.path.join(D, f)) if l.strip() and '"point"' in l]
def cell(v):
    return f"{st.median(v):.3f} ({min(v):.3f}-{max(v):.3f})"
for v in ("default", "poll"):
    pp = defaultdict(lambda: defaultdict(list))
    for r in rows(f"pingpong-{v}.jsonl"):
        pp[r["size_bytes"]][r["mode"]].append(r["per_rep_s"]["median"] * 1e3)
    for m, d in sorted(pp.items()):
        added = st.median(d["split"]) - st.median(d["direct"])
        print(f"{v:7} ping-pong {m:>5} B: direct {cell(d['direct'])} ms, split {cell(d['split'])} ms, added {added * 1e3:.0f} us")
    g = defaultdict(lambda: defaultdict(dict))
    for r in rows(f"gather-{v}.jsonl"):
        g[r["nodes"]][r["repeat"]][r["mode"]] = r["total_s"] / r["reps"] * 1e3
    for n, reps in sorted(g.items()):
        pairs = [x for x in reps.values() if "direct" in x and "split" in x]
        ratio = [x["split"] / x["direct"] for x in pairs]
        added = [x["split"] - x["direct"] for x in pairs]
        print(f"{v:7} gather {n:>2} x 1K: direct {cell([x['direct'] for x in pairs])} ms, "
              f"split/direct {cell(ratio)}, added {cell(added)} ms per gather")
