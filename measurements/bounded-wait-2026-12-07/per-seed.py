import json,sys,glob
base=json.load(open('base.json'))
def runs(rep):
    return {(r['seed']):r for run in rep['runs'] for r in run}
for f in sorted(glob.glob('w*.json')):
    try: d=json.load(open(f))
    except Exception: continue
    print('==',f)
    for name,sc,b in zip(['backlog','default','jobs'],d,base):
        bnd={s['seed'] if 'seed' in s else i: s for i,s in enumerate(b.get('bounds',[]))}
        out=[]
        for ri,run in enumerate(sc['runs']):
            r=run[0]
            br={c['column']['name']:c for c in b['runs'][ri]}
            ds,pf=br['default-scheduler'],br['preferred+proxy']
            bound=b['bounds'][ri] if b.get('bounds') else None
            bg=bound.get('jobs') if isinstance(bound,dict) else None
            out.append("seed%d gaveup=%d jct=%.3f(ds %.3f pf %.3f) mk=%.2f(ds %.2f) lost=%.1f(ds %.1f pf %.1f) gdr=%d/%s"%(r['seed'],r['jobs']-r['finished'],r['jctMeanHours'],ds['jctMeanHours'],pf['jctMeanHours'],r['makespanHours'],ds['makespanHours'],r['gpuHoursLost'],ds['gpuHoursLost'],pf['gpuHoursLost'],r['gpuDirectJobs'],bg))
        print(name, *out, sep='\n  ')
