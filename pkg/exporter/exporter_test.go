package exporter

import (
	"context"
	"errors"
	"net/netip"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/k8stopologyawareschedwg/noderesourcetopology-api/pkg/apis/topology/v1alpha2"
	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"

	"github.com/nicaffinity/nicaffinity/internal/drasim"
	"github.com/nicaffinity/nicaffinity/internal/podresourcessim"
	"github.com/nicaffinity/nicaffinity/pkg/annotations"
	"github.com/nicaffinity/nicaffinity/pkg/devices"
	"github.com/nicaffinity/nicaffinity/pkg/machines"
	"github.com/nicaffinity/nicaffinity/pkg/nrt"
	"github.com/nicaffinity/nicaffinity/pkg/podresources"
	"github.com/nicaffinity/nicaffinity/pkg/topology"
	"github.com/nicaffinity/nicaffinity/pkg/topology/discovery"
)

// h20 is the H20 fixture: pairs of GPUs with two (GPU6/7: three) PIX NICs;
// mlx5_2 down; one VF of mlx5_6 enabled.
func h20(t *testing.T) (discovery.Host, *topology.Topology) {
	t.Helper()
	tree := machines.New(t.TempDir())
	machines.H20(tree)
	tree.WriteFile("class/infiniband/mlx5_2/ports/1/state", "1: DOWN")
	vf := "pci0000:b0/0000:b0:01.0/0000:b1:00.0/0000:b2:08.0/0000:b8:00.2"
	tree.PCI(vf, machines.Func{Vendor: machines.VendorMellanox, Device: 0x101e, Class: machines.ClassEther, NUMA: 1})
	tree.SRIOV("pci0000:b0/0000:b0:01.0/0000:b1:00.0/0000:b2:08.0/0000:b8:00.0", 8, vf)
	if err := tree.Err(); err != nil {
		t.Fatal(err)
	}
	d := discovery.Host{SysfsRoot: tree.Root, NVMLMode: discovery.NVMLOff}
	topo, err := d.Discover()
	if err != nil {
		t.Fatal(err)
	}
	return d, topo
}

func gpu(topo *topology.Topology, i int) devices.Device {
	return devices.Device{Resource: "nvidia.com/gpu", ID: topo.GPUs[i].PCI.Address}
}

func TestVerify(t *testing.T) {
	_, topo := h20(t)
	v := NewVerifier("n1", topo, nrt.DefaultResources(), []string{"rdma/"}, topology.LevelPXB)
	hca := devices.Device{Resource: "rdma/hca", ID: "hca"}
	vf := devices.Device{Resource: "openshift.io/sriov_highnet", ID: "0000:b8:00.2"}
	plan := func(gpus ...string) map[string]string {
		return map[string]string{annotations.AllocationKey: annotations.Marshal(annotations.Allocation{Node: "n1", GPUs: gpus})}
	}
	tests := []struct {
		name        string
		pod         PodView
		wantLevel   string
		wantNICs    []string
		wantAligned bool
		wantPlan    string
		wantRDMA    bool
		wantProblem string
	}{
		{name: "shared RDMA, own switch", pod: PodView{Devices: []devices.Device{gpu(topo, 0), gpu(topo, 1), hca}},
			wantLevel: "PIX", wantNICs: []string{"mlx5_0"}, wantAligned: true, wantPlan: "none", wantRDMA: true},
		{name: "own NICs: one down, one up", pod: PodView{Devices: []devices.Device{gpu(topo, 2), hca}},
			wantLevel: "PIX", wantNICs: []string{"mlx5_3"}, wantAligned: true, wantPlan: "none", wantRDMA: true},
		{name: "VF of a far NIC", pod: PodView{Devices: []devices.Device{gpu(topo, 0), vf}},
			wantLevel: "SYS", wantNICs: []string{"mlx5_6"}, wantAligned: false, wantPlan: "none", wantRDMA: true},
		{name: "VF next to the GPU", pod: PodView{Devices: []devices.Device{gpu(topo, 7), vf}},
			wantLevel: "PIX", wantNICs: []string{"mlx5_6"}, wantAligned: true, wantPlan: "none", wantRDMA: true},
		{name: "max-level PIX annotation, NODE reached", pod: PodView{Devices: []devices.Device{gpu(topo, 4), vf}, Annotations: map[string]string{annotations.MaxLevel: "NODE"}},
			wantLevel: "NODE", wantNICs: []string{"mlx5_6"}, wantAligned: true, wantPlan: "none", wantRDMA: true},
		{name: "rdma annotation without a resource", pod: PodView{Devices: []devices.Device{gpu(topo, 5)}, Annotations: map[string]string{annotations.RDMA: "true"}},
			wantLevel: "PIX", wantNICs: []string{"mlx5_4"}, wantAligned: true, wantPlan: "none", wantRDMA: true},
		{name: "no RDMA", pod: PodView{Devices: []devices.Device{gpu(topo, 3)}}, wantAligned: true, wantPlan: "none"},
		{name: "plan matched", pod: PodView{Devices: []devices.Device{gpu(topo, 0), hca}, Annotations: plan(topo.GPUs[0].PCI.Address)},
			wantLevel: "PIX", wantNICs: []string{"mlx5_0"}, wantAligned: true, wantPlan: "matched", wantRDMA: true},
		{name: "plan differs", pod: PodView{Devices: []devices.Device{gpu(topo, 0), hca}, Annotations: plan(topo.GPUs[1].PCI.Address)},
			wantLevel: "PIX", wantNICs: []string{"mlx5_0"}, wantAligned: true, wantPlan: "differs", wantRDMA: true},
		{name: "unknown GPU ID", pod: PodView{Devices: []devices.Device{gpu(topo, 0), {Resource: "nvidia.com/gpu", ID: "GPU-ghost"}}},
			wantAligned: true, wantPlan: "none", wantProblem: `"GPU-ghost" is no GPU of this node`},
		{name: "DRA: a GPU and the NIC of its switch", pod: PodView{Claimed: []string{topo.GPUs[0].PCI.Address, nicPCI(topo, "mlx5_0")}},
			wantLevel: "PIX", wantNICs: []string{"mlx5_0"}, wantAligned: true, wantPlan: "none", wantRDMA: true},
		{name: "DRA: a GPU and a far NIC", pod: PodView{Claimed: []string{topo.GPUs[0].PCI.Address, nicPCI(topo, "mlx5_6")}},
			wantLevel: "SYS", wantNICs: []string{"mlx5_6"}, wantAligned: false, wantPlan: "none", wantRDMA: true},
		{name: "DRA: a VF next to the GPU, and an NVMe drive", pod: PodView{Claimed: []string{topo.GPUs[7].PCI.Address, "0000:b8:00.2", "0000:e1:00.0"}},
			wantLevel: "PIX", wantNICs: []string{"mlx5_6"}, wantAligned: true, wantPlan: "none", wantRDMA: true},
		{name: "DRA GPU, device-plugin VF", pod: PodView{Claimed: []string{topo.GPUs[7].PCI.Address}, Devices: []devices.Device{vf}},
			wantLevel: "PIX", wantNICs: []string{"mlx5_6"}, wantAligned: true, wantPlan: "none", wantRDMA: true},
		{name: "garbled max-level", pod: PodView{Devices: []devices.Device{gpu(topo, 0), hca}, Annotations: map[string]string{annotations.MaxLevel: "close"}},
			wantLevel: "PIX", wantNICs: []string{"mlx5_0"}, wantAligned: true, wantPlan: "none", wantRDMA: true, wantProblem: "nicaffinity.io/max-level"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := v.Verify(tc.pod)
			if !ok {
				t.Fatal("pod with GPUs not verified")
			}
			o := got.Observed
			if o.Level != tc.wantLevel || strings.Join(o.NICs, ",") != strings.Join(tc.wantNICs, ",") || o.Aligned != tc.wantAligned || o.Plan != tc.wantPlan || got.RDMA != tc.wantRDMA {
				t.Errorf("got level %q NICs %v aligned %v plan %q rdma %v; want %q %v %v %q %v", o.Level, o.NICs, o.Aligned, o.Plan, got.RDMA, tc.wantLevel, tc.wantNICs, tc.wantAligned, tc.wantPlan, tc.wantRDMA)
			}
			if tc.wantProblem != "" && !strings.Contains(strings.Join(got.Problems, "\n"), tc.wantProblem) {
				t.Errorf("problems %v lack %q", got.Problems, tc.wantProblem)
			}
		})
	}
	if _, ok := v.Verify(PodView{Devices: []devices.Device{{Resource: "rdma/hca", ID: "hca"}}}); ok {
		t.Error("a pod without GPUs was verified")
	}
}

func nicPCI(topo *topology.Topology, name string) string {
	for _, n := range topo.NICs {
		if n.Name == name {
			return n.PCI.Address
		}
	}
	panic("no NIC " + name)
}

// TestRunAuditsDRAClaims: a pod holds a GPU and a NIC through an allocated
// ResourceClaim; the exporter maps them to PCI addresses through the node's
// ResourceSlices, observes the pair's level, says Misaligned, and counts
// the GPU as not free where the device plugin also offers it.
func TestRunAuditsDRAClaims(t *testing.T) {
	disc, topo := h20(t)
	offered := allGPUs(topo)
	_, src := startKubelet(t, offered)
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "d", Namespace: "default"}, Spec: corev1.PodSpec{NodeName: "n1",
		ResourceClaims: []corev1.PodResourceClaim{{Name: "gpu-nic", ResourceClaimTemplateName: ptr.To("t")}}},
		Status: corev1.PodStatus{ResourceClaimStatuses: []corev1.PodResourceClaimStatus{{Name: "gpu-nic", ResourceClaimName: ptr.To("d-gpu-nic-x7")}}}}
	claim := &resourcev1.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "d-gpu-nic-x7"},
		Status: resourcev1.ResourceClaimStatus{Allocation: &resourcev1.AllocationResult{Devices: resourcev1.DeviceAllocationResult{Results: []resourcev1.DeviceRequestAllocationResult{
			{Request: "gpu", Driver: drasim.GPUDriver, Pool: "n1", Device: "gpu-0"},
			{Request: "nic", Driver: drasim.NICDriver, Pool: "n1", Device: "mlx5-6"},
		}}}}}
	kube := newFakeKube(pod).withClaims(claim).withSlices(drasim.Slices("n1", topo)...)
	pub := &memoryPublisher{}
	cfg := DefaultConfig("n1")
	cfg.MinWriteInterval = 50 * time.Millisecond
	exp := New(cfg, disc, src, kube, pub, nil)
	ctx := run(t, exp)
	var observed string
	if err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		observed = kube.pod("default", "d").Annotations[annotations.ObservedKey]
		return observed != "", nil
	}); err != nil {
		t.Fatalf("no observed annotation: %v", err)
	}
	o, err := annotations.ParseObserved(observed)
	if err != nil {
		t.Fatal(err)
	}
	if o.Aligned || o.Level != "SYS" || strings.Join(o.NICs, ",") != "mlx5_6" || len(o.GPUs) != 1 || o.GPUs[0].BusID != topo.GPUs[0].PCI.Address {
		t.Errorf("observed %+v, want GPU 0 with mlx5_6 at SYS, not aligned", o)
	}
	if err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		events := kube.eventsOf("d")
		return len(events) == 1 && events[0].Reason == "Misaligned" && events[0].Namespace == "default", nil
	}); err != nil {
		t.Errorf("no Misaligned event on the pod: %v", err)
	}
	obj := pub.last()
	for _, z := range obj.Zones {
		if z.Name == "gpu-0" && (len(z.Resources) == 0 || z.Resources[0].Available.String() != "0") {
			t.Errorf("GPU 0, held through DRA, is published free: %+v", z.Resources)
		}
	}
}

// TestBuildDRAOnlyNode: on a node whose GPUs only a DRA driver publishes
// (no GPU device plugin), the exporter reads the node's ResourceSlices and
// does not report its GPUs as fallen off the bus; without the slices it does.
func TestBuildDRAOnlyNode(t *testing.T) {
	disc, topo := h20(t)
	_, src := startKubelet(t, nil)
	gpuProblems := func(kube Kube) int {
		_, problems, _, err := New(DefaultConfig("n1"), disc, src, kube, &memoryPublisher{}, nil).Build(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, p := range problems {
			if strings.HasPrefix(p.Device, "GPU ") {
				n++
			}
		}
		return n
	}
	if n := gpuProblems(newFakeKube().withSlices(drasim.Slices("n1", topo)...)); n != 0 {
		t.Errorf("%d GPUs reported missing on a node whose DRA driver publishes them", n)
	}
	if n := gpuProblems(newFakeKube()); n != len(topo.GPUs) {
		t.Errorf("%d GPUs reported missing with no device plugin and no DRA driver, want %d", n, len(topo.GPUs))
	}
}

// TestRun drives the loop with fake clients and a real gRPC podresources
// server: the object appears, follows an allocation, and a burst of triggers
// is folded into few writes.
func TestRun(t *testing.T) {
	disc, topo := h20(t)
	offered := allGPUs(topo)
	kubelet, src := startKubelet(t, offered)
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "default"}, Spec: corev1.PodSpec{NodeName: "n1"}}
	kube := newFakeKube(pod)
	pub := &memoryPublisher{}
	cfg := DefaultConfig("n1")
	cfg.MinWriteInterval = 200 * time.Millisecond
	exp := New(cfg, disc, src, kube, pub, nil)
	ctx := run(t, exp)

	available := func(zone string) string {
		obj := pub.last()
		if obj == nil {
			return "none"
		}
		for _, z := range obj.Zones {
			if z.Name == zone && len(z.Resources) > 0 {
				return z.Resources[0].Available.String()
			}
		}
		return "absent"
	}
	poll := func(what string, cond func() bool) {
		t.Helper()
		if err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) { return cond(), nil }); err != nil {
			t.Fatalf("waiting for %s: %v", what, err)
		}
	}
	poll("the first object", func() bool { return available("gpu-0") == "1" && exp.Ready() })
	kubelet.SetPod("default", "p", []devices.Device{gpu(topo, 0), {Resource: "rdma/hca", ID: "hca"}})
	before := testutil.ToFloat64(exp.Metrics().Publishes.WithLabelValues("written"))
	for i := 0; i < 50; i++ {
		exp.Trigger()
	}
	poll("GPU 0 taken", func() bool { return available("gpu-0") == "0" })
	poll("the observed annotation", func() bool {
		return strings.Contains(kube.pod("default", "p").Annotations[annotations.ObservedKey], `"aligned":true`)
	})
	time.Sleep(3 * cfg.MinWriteInterval)
	if writes := testutil.ToFloat64(exp.Metrics().Publishes.WithLabelValues("written")) - before; writes != 1 {
		t.Errorf("50 triggers and one change made %v writes, want 1", writes)
	}
}

// run runs exp until the test ends, and fails the test if Run fails.
func run(t *testing.T, exp *Exporter) context.Context {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- exp.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
	return ctx
}

// memoryPublisher keeps what would have been applied. (Server-side apply
// itself is exercised against a real apiserver in test/integration.)
type memoryPublisher struct {
	mu  sync.Mutex
	obj *v1alpha2.NodeResourceTopology
	// refuse makes the next writes fail, as an apiserver refusing them.
	refuse int
}

func (m *memoryPublisher) Publish(_ context.Context, obj *v1alpha2.NodeResourceTopology) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.refuse > 0 {
		m.refuse--
		return errors.New("the server is currently unable to handle the request")
	}
	m.obj = obj.DeepCopy()
	return nil
}

func (m *memoryPublisher) last() *v1alpha2.NodeResourceTopology {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.obj
}

// TestRunRetriesRefusedWrites: the apiserver refuses the first writes; the
// exporter retries with backoff and publishes without any new trigger.
func TestRunRetriesRefusedWrites(t *testing.T) {
	disc, topo := h20(t)
	_, src := startKubelet(t, []devices.Device{gpu(topo, 0)})
	pub := &memoryPublisher{refuse: 3}
	cfg := DefaultConfig("n1")
	cfg.MinWriteInterval = 50 * time.Millisecond
	exp := New(cfg, disc, src, newFakeKube(), pub, nil)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- exp.Run(ctx) }()
	defer func() {
		cancel()
		<-done
	}()
	if err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		return pub.last() != nil, nil
	}); err != nil {
		t.Fatalf("never published after refused writes: %v", err)
	}
	if got := testutil.ToFloat64(exp.Metrics().Publishes.WithLabelValues("error")); got != 3 {
		t.Errorf("error count %v, want 3", got)
	}
}

// startKubelet serves podresources on a unix socket with devs offered and
// returns the server and a client of it; both stop with the test.
func startKubelet(t *testing.T, devs []devices.Device) (*podresourcessim.Server, *podresources.Client) {
	t.Helper()
	kubelet := podresourcessim.New(filepath.Join(t.TempDir(), "kubelet.sock"))
	kubelet.SetAllocatable(devs)
	if err := kubelet.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(kubelet.Stop)
	src, err := podresources.Dial(kubelet.Socket, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { src.Close() })
	return kubelet, src
}

// allGPUs is every GPU of topo as the device plugin offers it.
func allGPUs(topo *topology.Topology) []devices.Device {
	var out []devices.Device
	for i := range topo.GPUs {
		out = append(out, gpu(topo, i))
	}
	return out
}

// TestBuildRailsBySubnet: rails by subnet read each NIC's netdev at the
// edge; a NIC whose netdev is not there, or has only a /31, gets none.
func TestBuildRailsBySubnet(t *testing.T) {
	disc, _ := h20(t)
	_, src := startKubelet(t, nil)
	cfg := DefaultConfig("n1")
	cfg.Rails = nrt.Rails{Source: nrt.RailFromSubnet}
	cfg.InterfaceAddrs = func(netdev string) ([]netip.Prefix, error) {
		switch netdev {
		case "net-mlx5_0":
			return []netip.Prefix{netip.MustParsePrefix("fe80::1/64"), netip.MustParsePrefix("10.0.0.5/24")}, nil
		case "net-mlx5_1":
			return []netip.Prefix{netip.MustParsePrefix("10.0.1.4/31")}, nil
		}
		return nil, errors.New("no such network interface")
	}
	obj, _, _, err := New(cfg, disc, src, newFakeKube(), &memoryPublisher{}, nil).Build(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, z := range obj.Zones {
		for _, a := range z.Attributes {
			if a.Name == nrt.AttrRail {
				got[z.Name] = a.Value
			}
		}
	}
	if diff := cmp.Diff(map[string]string{"nic-mlx5_0": "10.0.0.0/24"}, got); diff != "" {
		t.Errorf("rails (-want,+got):\n%s", diff)
	}
}
