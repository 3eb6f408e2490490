package doctor

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"strings"
	"testing"

	"github.com/nicaffinity/nicaffinity/pkg/machines"
	"github.com/nicaffinity/nicaffinity/pkg/machines/machinestest"
	"github.com/nicaffinity/nicaffinity/pkg/topology"
	"github.com/nicaffinity/nicaffinity/pkg/topology/sysfs"
)

func discover(t *testing.T, build func(*machines.Tree)) *topology.Topology {
	t.Helper()
	tree := machines.New(t.TempDir())
	build(tree)
	if err := tree.Err(); err != nil {
		t.Fatal(err)
	}
	topo, err := sysfs.New(sysfs.WithRoot(tree.Root), sysfs.WithKernelRelease("6.8.0")).Discover()
	if err != nil {
		t.Fatal(err)
	}
	return topo
}

func find(r Report, layer, name string) *Check {
	for i := range r.Checks {
		if r.Checks[i].Layer == layer && r.Checks[i].Name == name {
			return &r.Checks[i]
		}
	}
	return nil
}

// TestNodeChecks: the findings that are not one of the machinestest
// breakages (cmd/nicaffinity tests those through the command).
func TestNodeChecks(t *testing.T) {
	tests := []struct {
		name       string
		build      func(*machines.Tree)
		opts       NodeOptions
		layer      string
		check      string
		status     Status
		detail     string
		failed     string
		notChecked string // a layer that must show as skipped
	}{
		{name: "RDMA driver loaded, no NIC visible (a VM without passthrough)", build: func(tr *machines.Tree) {
			tr.GPU("pci0000:00/0000:00:05.0", 0, "0-15")
			tr.Module("nvidia", "O")
			tr.Module("mlx5_ib", "")
		}, layer: LayerHost, check: "RDMA devices", status: Fail, detail: "though mlx5_ib is loaded: no RDMA-capable NIC is visible", failed: LayerHost, notChecked: LayerGPUDirect},
		{name: "no RDMA driver", build: func(tr *machines.Tree) {
			tr.GPU("pci0000:00/0000:00:05.0", 0, "0-15")
			tr.Module("nvidia", "O")
		}, layer: LayerHost, check: "RDMA devices", status: Fail, detail: "none in /sys/class/infiniband", failed: LayerHost},
		{name: "keep going past the failure", build: func(tr *machines.Tree) {
			tr.GPU("pci0000:00/0000:00:05.0", 0, "0-15")
			tr.Module("nvidia", "O")
		}, opts: NodeOptions{KeepGoing: true}, layer: LayerGPUDirect, check: "nvidia-peermem or dma-buf", status: Pass, detail: "dma-buf usable (open kernel module, kernel 6.8.0)", failed: LayerHost},
		{name: "IOMMU translating: a warning", build: func(tr *machines.Tree) {
			machinestest.ReadyHGXH100()(tr)
			tr.IOMMU("DMA-FQ", "dmar0")
		}, layer: LayerGPUDirect, check: "IOMMU", status: Warn, detail: "translating DMA"},
		{name: "ACS unreadable without root", build: func(tr *machines.Tree) {
			machinestest.ReadyHGXH100()(tr)
			tr.WriteBytes("devices/"+"pci0000:10/0000:10:01.0/0000:11:00.0/0000:12:00.0/0000:13:00.0/0000:14:00.0/config", make([]byte, 64))
		}, layer: LayerGPUDirect, check: "ACS on GPU-NIC paths", status: Unknown, detail: "config space of 1 bridges unreadable"},
		{name: "RoCE at MTU 1500: a warning", build: func(tr *machines.Tree) {
			machinestest.ReadyHGXH100()(tr)
			tr.SetPort("mlx5_0", 1, "link_layer", "Ethernet")
			tr.GID("mlx5_0", 1, 1, "fe80:0000:0000:0000:0ac0:ebff:fe00:0001", "RoCE v2")
			tr.WriteFile("class/infiniband/mlx5_0/device/net/net-mlx5_0/mtu", "1500")
		}, layer: LayerPorts, check: "mlx5_0 port 1", status: Warn, detail: "RoCE v2 GID present"},
		{name: "half-NIC machine: GPUs without a close NIC are warned about", build: func(tr *machines.Tree) {
			machines.HalfNICs(tr)
			tr.GPUDirectReady()
		}, layer: LayerTopology, check: "GPU 0 (0000:12:00.0)", status: Warn, detail: "nearest NIC mlx5_0 at PHB"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := Node(discover(t, tc.build), tc.opts)
			c := find(r, tc.layer, tc.check)
			if c == nil || c.Status != tc.status || !strings.Contains(c.Detail, tc.detail) {
				t.Fatalf("check %q at %q = %+v, want %s with %q; report %+v", tc.check, tc.layer, c, tc.status, tc.detail, r.Checks)
			}
			if (c.Status == Fail || c.Status == Warn) && c.Fix == "" {
				t.Errorf("a %s without a fix", c.Status)
			}
			if r.FailedLayer != tc.failed {
				t.Errorf("failed layer %q, want %q", r.FailedLayer, tc.failed)
			}
			if tc.notChecked != "" {
				if s := find(r, tc.notChecked, "not checked"); s == nil || s.Status != Skipped {
					t.Errorf("layer %q was checked after a failure: %+v", tc.notChecked, r.Checks)
				}
			}
		})
	}
}

// TestPodRequestCheck: doctor pod says what the plugin reads of the pod,
// through the plugin's reader, and fails a pod whose annotation the plugin
// refuses.
func TestPodRequestCheck(t *testing.T) {
	mk := func(ann map[string]string) PodState {
		// As the apiserver stores it: requests of extended resources
		// default to their limits.
		res := corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("2"), "openshift.io/sriov_highnet": resource.MustParse("2")}
		return PodState{SchedulerName: "nicaffinity-scheduler", Pod: &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: "train", Namespace: "ml", Annotations: ann},
			Spec: corev1.PodSpec{SchedulerName: "nicaffinity-scheduler", Containers: []corev1.Container{{Name: "c",
				Resources: corev1.ResourceRequirements{Limits: res, Requests: res}}}}}}
	}
	check := func(r Report) Check {
		for _, c := range r.Checks {
			if c.Name == "request" {
				return c
			}
		}
		t.Fatal("no request check")
		return Check{}
	}
	o := DefaultClusterOptions()
	if c := check(Pod(mk(map[string]string{"nicaffinity.io/policy": "preferred"}), o)); c.Status != Info ||
		c.Detail != "2 GPUs, each with a NIC at P2C or closer (preferred), 2 VFs of openshift.io/sriov_highnet" {
		t.Errorf("VF pod: %+v", c)
	}
	if c := check(Pod(mk(map[string]string{"nicaffinity.io/max-level": "CLOSE"}), o)); c.Status != Fail || !strings.Contains(c.Detail, "nicaffinity.io/max-level") {
		t.Errorf("bad level: %+v", c)
	}
}

// TestDoctorLayers: each layer of doctor node and doctor pod on its own.
func TestDoctorLayers(t *testing.T) {
	caps := func(add ...corev1.Capability) *corev1.SecurityContext {
		return &corev1.SecurityContext{Capabilities: &corev1.Capabilities{Add: add}}
	}
	gpu := corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("1")}
	for _, tc := range []struct {
		name string
		c    corev1.Container
		want Status
	}{
		{"devices, IPC_LOCK", corev1.Container{Name: "c", SecurityContext: caps("IPC_LOCK"), Resources: corev1.ResourceRequirements{Limits: gpu}}, Pass},
		{"devices, no IPC_LOCK", corev1.Container{Name: "c", Resources: corev1.ResourceRequirements{Limits: gpu}}, Fail},
	} {
		b := newBuilder("pod")
		podPermissions(b, &corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{tc.c}}}, DefaultClusterOptions())
		if got := b.report().Checks[0]; got.Status != tc.want || got.Name != "container c: IPC_LOCK" {
			t.Errorf("%s: %+v, want %s", tc.name, got, tc.want)
		}
	}
	b := newBuilder("pod")
	podNetwork(b, PodState{Pod: &corev1.Pod{}}, nil)
	if got := b.report().Checks[0]; got.Name != "NCCL_IB_HCA" || got.Status != Info {
		t.Errorf("no observation: %+v", got)
	}
	topo, err := machines.Load("half-nic-8gpu-2nic")
	if err != nil {
		t.Fatal(err)
	}
	b = newBuilder("node")
	nodeTopology(b, topo, NodeOptions{MaxLevel: topology.LevelPXB})
	warned := 0
	for _, c := range b.report().Checks {
		if c.Status == Warn {
			warned++
		}
	}
	if warned != 4 {
		t.Errorf("%d GPUs warned on the half-NIC shape, want the 4 without a NIC at PXB", warned)
	}
}
