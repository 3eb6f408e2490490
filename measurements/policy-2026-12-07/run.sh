#!/bin/bash
# Every policy replay of round 4's policy issue, on the device machine.
set -u
D=$(cd "$(dirname "$0")" && pwd)
cd "$D"
xz -dkf nsim.xz && chmod +x nsim
N=$D/nsim
O=${OUT:-/tmp/out}
mkdir -p "$O"
nproc > "$O/nproc.txt"; date -u > "$O/start.txt"
{
echo "large.json simulate --scenario large --runs 1 --parallel 5 -o json"
echo "demo.txt simulate --scenario backlog,default,jobs"
echo "demo.json simulate --scenario backlog,default,jobs -o json"
echo "demo2.json simulate --scenario backlog,default,jobs -o json"
for k in hgx-h100-8gpu-8nic half-nic-8gpu-2nic dgx-a100-8gpu-10nic gb200-tray-4gpu-8nic h20-3e-8gpu-11nic-sriov profile_azure-ndv2-v100-8gpu; do
  s=single.yaml; [ $k = gb200-tray-4gpu-8nic ] && s=single4.yaml
  echo "s-$k.json simulate --cluster c-$k.yaml --workload $s --runs 3 --columns bounded+proxy,required+proxy,preferred+proxy,default-scheduler -o json"
  echo "m-$k.json simulate --cluster c-$k.yaml --workload multi.yaml --runs 3 --columns bounded+proxy,gangs+rails,default-scheduler+gangs,default-scheduler -o json"
done
} > "$O/commands.txt"
run() {
  out=$1; shift
  t0=$(date +%s.%N)
  if [ -x /usr/bin/time ]; then
    /usr/bin/time -f "%e s wall %U user %S sys %M KB" -o "$O/$out.time" "$N" "$@" > "$O/$out" 2> "$O/$out.err"
  else
    "$N" "$@" > "$O/$out" 2> "$O/$out.err"
  fi
  rc=$?
  echo "$out rc=$rc start=$t0 end=$(date +%s.%N)" >> "$O/rc.txt"
}
export -f run; export N O
xargs -P "${P:-7}" -L 1 bash -c 'run "$@"' _ < "$O/commands.txt"
date -u > "$O/end.txt"
cd "$O" && mkdir -p results && mv ./*.* results/ && tar -cJf results.tar.xz results && rm -rf results
