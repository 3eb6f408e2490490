#!/bin/bash
for k in hgx-h100-8gpu-8nic half-nic-8gpu-2nic dgx-a100-8gpu-10nic gb200-tray-4gpu-8nic h20-3e-8gpu-11nic-sriov profile_azure-ndv2-v100-8gpu; do
  s=single.yaml; [ $k = gb200-tray-4gpu-8nic ] && s=single4.yaml
  /tmp/nsim simulate --cluster c-$k.yaml --workload $s --runs 3 --columns bounded+proxy,required+proxy,preferred+proxy,default-scheduler -o json > s-$k.json 2> s-$k.err
  m=multi.yaml
  /tmp/nsim simulate --cluster c-$k.yaml --workload $m --runs 3 --columns bounded+proxy,gangs+rails,default-scheduler+gangs,default-scheduler -o json > m-$k.json 2> m-$k.err
done
echo done > done
