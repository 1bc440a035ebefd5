# Medians (min-max) over repetitions of a gather sweep JSONL: split/direct time, the busier
# gateway's CPU (and, where the sweep traced it, the part of it spent in softirq), split
# efficiency, timeouts, and (v7 on) which queues dropped. Usage: python3 THIS FILE [RESULTS.jsonl] (default: v5; v6 uses it too).
import json, sys, statistics as st, collections
f = sys.argv[1] if len(sys.argv) > 1 else __file__.replace("-tables.py", ".jsonl")
pts = collections.defaultdict(dict)
for l in open(f):
    r = json.loads(l)
    if r.get('kind') != 'point': continue
    pts[(r['impl'], r['nodes'], r['size_bytes'], r['repeat'])][r['mode']] = r
sirq = collections.defaultdict(list); own = collections.defaultdict(list)
ratio = collections.defaultdict(list); cpu = collections.defaultdict(list); eff = collections.defaultdict(list); lto = collections.defaultdict(list)
for (impl, n, s, k), m in pts.items():
    if 'split' in m and 'direct' in m:
        sp, d = m['split'], m['direct']
        ratio[(impl, n, s)].append((sp['total_s']/sp['reps'])/(d['total_s']/d['reps']))
        busy = max(sp['cpu']['gateways'].values(), key=lambda g: g['pct'])
        cpu[(impl, n, s)].append(busy['pct'])
        if busy.get('softirq_pct') is not None:
            sirq[(impl, n, s)].append(busy['softirq_pct'])
            own[(impl, n, s)].append(busy['pct'] - busy['softirq_pct'])
        eff[(impl, n, s)].append(sp.get('efficiency') or float('nan'))
        lto[(impl, n, s)].append((d['counters']['distant'].get('TCPTimeouts',0), sp['counters']['local'].get('TCPTimeouts',0), sp['counters']['distant'].get('TCPTimeouts',0)))
sizes = sorted({k[2] for k in ratio})
lab = lambda s: f"{s//1000000}M" if s >= 1000000 else f"{s//1000}K"
def cell(v, p=2): return f"{st.median(v):.{p}f} ({min(v):.{p}f}-{max(v):.{p}f})"
tables = [("split/direct", ratio, 2), ("busier gateway CPU %", cpu, 1), ("split efficiency", eff, 2)]
if sirq:
    tables[2:2] = [("of which softirq run in its context, %", sirq, 1), ("busier gateway CPU without it, %", own, 1)]
for title, d, p in tables:
    if not d: continue
    print(f"\n### {title}\n\n| impl | nodes | " + " | ".join(lab(s) for s in sizes) + " |\n|---|---:|" + "---:|"*len(sizes))
    for impl, n in sorted({(k[0], k[1]) for k in d}, key=lambda x: (x[0] != 'openmpi', x[1])):
        print(f"| {impl} | {n} | " + " | ".join(cell(d[(impl, n, s)], p) if (impl, n, s) in d else "" for s in sizes) + " |")
print("\n### timeouts (direct distant / split local / split distant), points with any\n")
for k in sorted(lto):
    if any(any(x) for x in lto[k]): print(f"| {k[0]} {k[1]} × {lab(k[2])} | " + ", ".join("/".join(map(str, x)) for x in lto[k]) + " |")
# Rows from v7 on record which lab queue dropped packets: for each split run with WAN
# retransmissions, where the drops were (and the same for the paired direct run).
wq = [(k, m) for k, m in sorted(pts.items()) if 'split' in m and 'drops' in m['split']
      and m['split']['counters']['distant'].get('RetransSegs', 0)]
if wq:
    print("\n### split runs with WAN retransmissions: WAN retrans, and drops per queue (split | direct)\n")
    for (impl, n, s, k), m in wq:
        q = lambda r: ", ".join(f"{a}: {b}" for a, b in sorted(r.get('drops', {}).items(), key=lambda x: -x[1])) or "none"
        print(f"| {impl} {n} × {lab(s)} #{k} | {m['split']['counters']['distant']['RetransSegs']} | {q(m['split'])} | "
              f"{q(m['direct']) if 'direct' in m else ''} |")
