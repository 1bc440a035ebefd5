# Split-mode medians (min-max) per point and variant of an A/B directory: split/direct,
# split ms per gather, local RTOs and retransmissions, both gateways' CPU. Usage: cmp.py DIR VARIANTS
import json, sys, glob, statistics as st, collections
d = sys.argv[1]; variants = sys.argv[2].split(',')
rows = collections.defaultdict(list)
for v in variants:
    for f in sorted(glob.glob(f"{d}/{v}-r*.jsonl")):
        rnd = f.split('-r')[-1].split('.')[0]
        pts = {}
        for l in open(f):
            r = json.loads(l)
            if 'mode' not in r: continue
            pts[(r['nodes'], r['size_bytes'], r['mode'])] = r
        for (n, s, m), r in pts.items():
            if m != 'split': continue
            dr = pts.get((n, s, 'direct'))
            rows[(n, s, v)].append(dict(
                ratio=r['total_s']/r['reps']/(dr['total_s']/dr['reps']) if dr else float('nan'),
                ms=1000*r['total_s']/r['reps'],
                lto=r['counters']['local'].get('TCPTimeouts', 0),
                lre=r['counters']['local'].get('RetransSegs', 0),
                gb=r['cpu']['gateways']['bordeaux']['pct'], gs=r['cpu']['gateways']['sophia']['pct'],
                eff=r.get('efficiency')))
def fmt(xs, k, p=2):
    v = [x[k] for x in xs]
    return f"{st.median(v):.{p}f} ({min(v):.{p}f}-{max(v):.{p}f})"
print(f"{'n':>3} {'size':>8} {'var':>5} {'k':>2} {'split/direct':>18} {'split ms/gather':>22} {'local RTO':>10} {'local retr':>12} {'gw bdx %':>18} {'gw sophia %':>18}")
for (n, s, v) in sorted(rows):
    xs = rows[(n, s, v)]
    print(f"{n:>3} {s:>8} {v:>5} {len(xs):>2} {fmt(xs,'ratio'):>18} {fmt(xs,'ms',1):>22} {','.join(str(x['lto']) for x in xs):>10} {','.join(str(x['lre']) for x in xs):>12} {fmt(xs,'gb',1):>18} {fmt(xs,'gs',1):>18}")
