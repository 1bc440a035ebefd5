# Split runs of sweep v7 that record the delay line's schedule (`emulator`): did the port
# toward the receiving gateway drop packets, against how late the delay line ran?
# Usage: python3 THIS FILE RESULTS.jsonl...
import json, sys
rows = [json.loads(l) for f in sys.argv[1:] for l in open(f) if l.strip()]
rows = [r for r in rows if r.get("kind") == "point" and r.get("emulator")]
for mode in ("direct", "split"):
    sel = sorted((r for r in rows if r["mode"] == mode), key=lambda r: r["emulator"]["worst_late_us"])
    print(f"\n{mode}: {len(sel)} runs; late fraction {min(r['emulator']['late_fraction'] for r in sel):.1%}-"
          f"{max(r['emulator']['late_fraction'] for r in sel):.1%}")
    if mode == "direct":  # no traffic goes to the gateways: only the schedule is of interest
        continue
    for lo, hi in ((0, 2000), (2000, 5000), (5000, 7500), (7500, 1e9)):
        b = [r for r in sel if lo <= r["emulator"]["worst_late_us"] < hi]
        if not b:
            continue
        # The port toward the receiving gateway is fed by the WAN only (its sender,
        # the other gateway, is one 100 Mb/s NIC): it can only overflow on a burst.
        port = lambda r: sum(v for k, v in r["drops"].items() if k.endswith("switch → sophia-gw"))
        hit = [r for r in b if port(r)]
        print(f"  worst lateness {lo / 1000:g}-{'' if hi > 1e8 else f'{hi / 1000:g}'} ms: {len(b)} runs, "
              f"{len(hit)} with drops at the port toward sophia-gw"
              + (f" ({', '.join(str(port(r)) for r in hit)})" if hit else ""))
