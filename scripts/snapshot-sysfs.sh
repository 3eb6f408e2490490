#!/usr/bin/env bash
# Copies the parts of /sys that nicaffinity reads (PCI functions, RDMA devices,
# NUMA nodes) into DIR as plain files and relative symlinks, so a machine's
# shape can become a test fixture: nicaffinity topo --sysfs-root DIR.
set -euo pipefail
src=${SYSFS:-/sys}
dst=${1:?usage: snapshot-sysfs.sh DIR}
mkdir -p "$dst/bus/pci/devices" "$dst/class/infiniband"
copy_attrs() { # $1 real dir under $src, $2 files...
  local d=$1; shift
  local out="$dst/${d#"$src"/}"
  mkdir -p "$out"
  for f in "$@"; do [ -r "$d/$f" ] && cat "$d/$f" > "$out/$f" 2>/dev/null || true; done
}
relink() { # $1 link path under $dst, $2 target real path under $src
  local link="$dst/$1" target="$dst/${2#"$src"/}"
  mkdir -p "$(dirname "$link")" "$target"
  ln -sfn "$(realpath -m --relative-to="$(dirname "$link")" "$target")" "$link"
}
for l in "$src"/bus/pci/devices/*; do
  real=$(readlink -f "$l")
  copy_attrs "$real" vendor device class numa_node local_cpulist sriov_totalvfs
  relink "bus/pci/devices/$(basename "$l")" "$real"
  for v in "$real"/virtfn* "$real"/physfn; do
    [ -L "$v" ] && relink "${real#"$src"/}/$(basename "$v")" "$(readlink -f "$v")"
  done
  if [ -d "$real/net" ]; then for n in "$real"/net/*; do mkdir -p "$dst/${n#"$src"/}"; done; fi
done
for ib in "$src"/class/infiniband/*; do
  [ -e "$ib" ] || continue
  real=$(readlink -f "$ib")
  relink "class/infiniband/$(basename "$ib")" "$real"
  relink "${real#"$src"/}/device" "$(readlink -f "$ib/device")"
  for p in "$real"/ports/*; do copy_attrs "$p" link_layer state rate; done
done
for n in "$src"/devices/system/node/node[0-9]*; do
  [ -d "$n" ] && copy_attrs "$n" cpulist distance
done
