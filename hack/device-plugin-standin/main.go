// Command device-plugin-standin stands in for a node's vendor device
// plugins in the test cluster (internal/realcluster), in a real container:
// it reads the node's machine shape from a sysfs tree and serves, over the
// real device-plugin API, its GPUs as the NVIDIA device plugin does
// (go-gpuallocator's best-effort preference, NVIDIA_VISIBLE_DEVICES in
// Allocate), its SR-IOV VFs as the SR-IOV device plugin does, and shared
// RDMA slots as the RDMA shared device plugin does. Not shipped.
package main

import (
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"

	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/nicaffinity/nicaffinity/internal/gpualloc"
	"github.com/nicaffinity/nicaffinity/internal/realkubelet"
	"github.com/nicaffinity/nicaffinity/pkg/machines"
	"github.com/nicaffinity/nicaffinity/pkg/topology"
	"github.com/nicaffinity/nicaffinity/pkg/topology/discovery"
)

func main() {
	sysfs := flag.String("sysfs-root", "/host/sys", "the node's sysfs tree")
	vendorDir := flag.String("vendor-dir", "", "where GPUs and VFs register: the allocation proxy's vendor directory, or the kubelet's device-plugin directory")
	kubeletDir := flag.String("kubelet-dir", "/var/lib/kubelet/device-plugins", "the kubelet's device-plugin directory, where the RDMA slots register")
	gpuRes := flag.String("gpu-resource", "nvidia.com/gpu", "")
	rdmaRes := flag.String("rdma-resource", "rdma/rdma_shared_device_a", "the RDMA shared device plugin's resource (the NVIDIA Network Operator's default name, which manifests/examples ask for)")
	vfRes := flag.String("vf-resource", "openshift.io/sriov_highnet", "")
	flag.Parse()
	if *vendorDir == "" {
		*vendorDir = *kubeletDir
	}
	topo, err := discovery.Host{SysfsRoot: *sysfs, NVMLMode: discovery.NVMLOff, NVIDIAProc: filepath.Join(*sysfs, machines.NVIDIAProcDir)}.Discover()
	if err != nil {
		fmt.Fprintln(os.Stderr, "error: reading the machine:", err)
		os.Exit(1)
	}
	dev := func(id string, numa int) *pluginapi.Device {
		d := &pluginapi.Device{ID: id, Health: pluginapi.Healthy}
		if numa >= 0 {
			d.Topology = &pluginapi.TopologyInfo{Nodes: []*pluginapi.NUMANode{{ID: int64(numa)}}}
		}
		return d
	}
	var gpus, vfs, rdma []*pluginapi.Device
	for i, g := range topo.GPUs {
		gpus = append(gpus, dev(gpualloc.GPUID(topo, i), topology.NUMAOf(g.PCI)))
	}
	for _, nic := range topo.NICs {
		for _, vf := range nic.VFs {
			vfs = append(vfs, dev(vf, topology.NUMAOf(nic.PCI)))
		}
	}
	if len(topo.NICs) > 0 {
		for i := range 16 {
			rdma = append(rdma, dev(fmt.Sprintf("rdma-%d", i), -1))
		}
	}
	var started []*realkubelet.Vendor
	start := func(o realkubelet.VendorOptions) {
		if len(o.Devices) == 0 {
			return
		}
		v, err := realkubelet.StartVendor(o)
		if err != nil {
			fmt.Fprintf(os.Stderr, "error: serving %s: %v\n", o.Resource, err)
			os.Exit(1)
		}
		fmt.Printf("serving %d %s in %s\n", len(o.Devices), o.Resource, o.Dir)
		started = append(started, v)
	}
	start(realkubelet.VendorOptions{Dir: *vendorDir, Resource: *gpuRes, Devices: gpus,
		Prefer: func(available, must []string, size int) []string {
			return gpualloc.BestEffortIDs(topo, slices.Sorted(slices.Values(available)), must, size)
		},
		Env: func(ids []string) map[string]string {
			return map[string]string{"NVIDIA_VISIBLE_DEVICES": strings.Join(ids, ",")}
		}})
	start(realkubelet.VendorOptions{Dir: *vendorDir, Resource: *vfRes, Devices: vfs})
	start(realkubelet.VendorOptions{Dir: *kubeletDir, Resource: *rdmaRes, Devices: rdma})
	c := make(chan os.Signal, 1)
	signal.Notify(c, syscall.SIGINT, syscall.SIGTERM)
	<-c
	for _, v := range started {
		v.Stop()
	}
}
