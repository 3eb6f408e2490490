import json,glob,statistics,os
kinds=["hgx-h100-8gpu-8nic","dgx-a100-8gpu-10nic","half-nic-8gpu-2nic","h20-3e-8gpu-11nic-sriov","gb200-tray-4gpu-8nic","profile_azure-ndv2-v100-8gpu"]
def load(f):
    if not os.path.exists(f): return None
    try:
        d=json.load(open(f))
        return d[0] if isinstance(d,list) else d
    except Exception: return None
def per_run(rep, col, key):
    out=[]
    for run in rep['runs']:
        for r in run:
            if r['column']['name']==col: out.append(r[key])
    return out
def rel(a,b):
    return [100*(x-y)/y if y else 0 for x,y in zip(a,b)]
def fmt(v):
    v=sorted(v); m=statistics.median(v)
    return "%+.1f%% [%+.1f, %+.1f]"%(m,v[0],v[-1])
def med(v): return statistics.median(v)
print("| machine (8 nodes) | single-pod jobs: bounded vs default scheduler, mean completion | GPU-h lost, bounded / default | multi-pod jobs: gangs+rails vs default scheduler with gangs, mean completion | GPU-h lost, gangs+rails / default with gangs |")
print("|---|---|---|---|---|")
for k in kinds:
    s=load(f"s-{k}.json"); m=load(f"m-{k}.json")
    row=[k.replace('profile_','profile/')]
    if s:
        row.append(fmt(rel(per_run(s,'bounded+proxy','jctMeanHours'),per_run(s,'default-scheduler','jctMeanHours'))))
        row.append("%.1f / %.1f"%(med(per_run(s,'bounded+proxy','gpuHoursLost')),med(per_run(s,'default-scheduler','gpuHoursLost'))))
    else: row+=["-","-"]
    if m:
        row.append(fmt(rel(per_run(m,'gangs+rails','jctMeanHours'),per_run(m,'default-scheduler+gangs','jctMeanHours'))))
        row.append("%.1f / %.1f"%(med(per_run(m,'gangs+rails','gpuHoursLost')),med(per_run(m,'default-scheduler+gangs','gpuHoursLost'))))
    else: row+=["-","-"]
    print("| "+" | ".join(row)+" |")
# bounded vs default+gangs on multi for HGX (done-when)
for k in kinds:
    m=load(f"m-{k}.json")
    if m:
        print(k, "multi bounded vs default+gangs per seed:", ["%+.1f"%x for x in rel(per_run(m,'bounded+proxy','jctMeanHours'),per_run(m,'default-scheduler+gangs','jctMeanHours'))],
              "gangs+rails vs default+gangs:", ["%+.1f"%x for x in rel(per_run(m,'gangs+rails','jctMeanHours'),per_run(m,'default-scheduler+gangs','jctMeanHours'))],
              "given up:", {c: med([r['jobs']-r['finished'] for run in m['runs'] for r in run if r['column']['name']==c]) for c in ['bounded+proxy','gangs+rails','default-scheduler+gangs','default-scheduler']})
    s=load(f"s-{k}.json")
    if s:
        print(k, "single bounded vs default per seed:", ["%+.1f"%x for x in rel(per_run(s,'bounded+proxy','jctMeanHours'),per_run(s,'default-scheduler','jctMeanHours'))],
              "given up:", {c: med([r['jobs']-r['finished'] for run in s['runs'] for r in run if r['column']['name']==c]) for c in ['bounded+proxy','required+proxy','preferred+proxy','default-scheduler']})
