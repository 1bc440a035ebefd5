# The delay-line RT A/B per point: split/direct per round, the delay line's late share and worst lateness,
# the busier gateway's CPU and split's WAN retransmissions. Usage: python3 THIS FILE
import json,statistics as st,sys
from collections import defaultdict
import os; D=os.path.dirname(os.path.abspath(__file__)) + '/'
for rt in (5,0):
    rows=[json.loads(l) for l in open(f'{D}rt{rt}.jsonl') if l.strip()]
    pts=[r for r in rows if r['kind']=='point']
    g=defaultdict(lambda: defaultdict(list))
    for r in pts: g[(r['nodes'],r['size_bytes'])][r['mode']].append(r)
    for (n,m),d in sorted(g.items()):
        dd={r['repeat']:r for r in d['direct']}
        ratios=[r['total_s']/dd[r['repeat']]['total_s'] for r in d['split'] if r['repeat'] in dd]
        def f(mode,key): 
            v=[r['emulator'][key] for r in d[mode] if r.get('emulator')]
            return v
        late_s=f('split','late_fraction'); late_d=f('direct','late_fraction')
        w_s=f('split','worst_late_us')
        gw=[max(x['pct'] for x in r['cpu']['gateways'].values()) for r in d['split']]
        wr=[r['counters']['distant']['RetransSegs'] for r in d['split']]
        print(f"rt{rt} {n}x{m}: ratio {' '.join('%.2f'%x for x in ratios)} | late split {' '.join('%.1f%%'%(100*x) for x in late_s)} direct {' '.join('%.1f%%'%(100*x) for x in late_d)} | worst split {' '.join('%.1f'%(x/1e3) for x in w_s)} ms | gw cpu {' '.join('%.0f'%x for x in gw)} | split WAN rtx {wr}")
