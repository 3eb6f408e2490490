//go:build kubelet

// Package kubelet runs nicaffinity's node side against Kubernetes' own
// kubelet (internal/realkubelet): its device manager admits the pods and
// its podresources server tells the exporter and the proxy what each pod
// holds. make test-kubelet builds the kubelet and runs these tests.
package kubelet

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/k8stopologyawareschedwg/noderesourcetopology-api/pkg/apis/topology/v1alpha2"
	"github.com/k8stopologyawareschedwg/podfingerprint"
	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/record"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/nicaffinity/nicaffinity/internal/cluster"
	"github.com/nicaffinity/nicaffinity/internal/controlplane"
	"github.com/nicaffinity/nicaffinity/internal/gpualloc"
	"github.com/nicaffinity/nicaffinity/internal/realkubelet"
	"github.com/nicaffinity/nicaffinity/internal/schedulerrun"
	"github.com/nicaffinity/nicaffinity/pkg/allocproxy"
	"github.com/nicaffinity/nicaffinity/pkg/annotations"
	"github.com/nicaffinity/nicaffinity/pkg/devices"
	"github.com/nicaffinity/nicaffinity/pkg/exporter"
	"github.com/nicaffinity/nicaffinity/pkg/machines"
	"github.com/nicaffinity/nicaffinity/pkg/nrt"
	"github.com/nicaffinity/nicaffinity/pkg/podresources"
	"github.com/nicaffinity/nicaffinity/pkg/topology"
	"github.com/nicaffinity/nicaffinity/pkg/topology/discovery"
)

const (
	gpuRes  = "nvidia.com/gpu"
	rdmaRes = "rdma/hca"
	vfRes   = "openshift.io/sriov_highnet"
	sched   = "nicaffinity-scheduler"
)

// nodeSpec is one real node to run.
type nodeSpec struct {
	name    string
	machine func(*machines.Tree)
	// opts change the kubelet's options (CPU and Topology Manager).
	opts func(*realkubelet.Options)
	// proxy tunes the allocation proxy; noProxy registers the vendor
	// plugins with the kubelet directly.
	proxy   func(*allocproxy.Config)
	noProxy bool
}

// env is a control plane with RBAC, Node authorization and
// NodeRestriction; per node a real kubelet, stand-in vendor plugins
// behind the real allocation proxy, and the real exporter; and the real
// scheduler with the shipped configuration plus a default profile.
type env struct {
	cp    *controlplane.ControlPlane
	nodes map[string]*node
	stop  func()
	// sim holds simulated nodes beside the real ones (TestRealKubeletStandIn).
	sim *cluster.Cluster
}

type node struct {
	spec      nodeSpec
	t         *testing.T
	cp        *controlplane.ControlPlane
	topo      *topology.Topology
	disc      exporter.Discoverer
	kubelet   *realkubelet.Kubelet
	vendorDir string
	lister    corelisters.PodLister

	mu       sync.Mutex
	vendors  map[string]*realkubelet.Vendor
	proxy    *allocproxy.Proxy
	stopProx func()
	stopExp  func()
}

func nodeToken(name string) string { return "token-" + name }

func startEnv(t *testing.T, specs ...nodeSpec) *env {
	t.Helper()
	if err := realkubelet.Check(); err != nil {
		t.Fatal(err)
	}
	if _, err := realkubelet.Binary(); err != nil {
		t.Fatal(err)
	}
	var tokens []controlplane.StaticToken
	for _, s := range specs {
		tokens = append(tokens, controlplane.StaticToken{Token: nodeToken(s.name), User: "system:node:" + s.name, Groups: []string{"system:nodes"}})
	}
	cp := controlplane.Start(t, controlplane.WithAuthorization(tokens...))
	e := &env{cp: cp, nodes: map[string]*node{}}
	for _, s := range specs {
		e.nodes[s.name] = startNode(t, cp, s)
	}
	for _, n := range e.nodes {
		n.waitAllocatable(gpuRes, len(n.topo.GPUs))
		e.waitNRT(t, n.spec.name)
	}
	cfg, err := schedulerrun.ShippedConfig()
	if err != nil {
		t.Fatal(err)
	}
	e.stop = schedulerrun.Start(t, cp, schedulerrun.WithDefaultProfile(cfg))
	return e
}

func startNode(t *testing.T, cp *controlplane.ControlPlane, s nodeSpec) *node {
	t.Helper()
	n := &node{spec: s, t: t, cp: cp, vendors: map[string]*realkubelet.Vendor{}}
	tree := machines.New(t.TempDir())
	s.machine(tree)
	if err := tree.Err(); err != nil {
		t.Fatal(err)
	}
	n.disc = discovery.Host{SysfsRoot: tree.Root, NVMLMode: discovery.NVMLOff, NVIDIAProc: filepath.Join(tree.Root, machines.NVIDIAProcDir)}
	var err error
	if n.topo, err = n.disc.Discover(); err != nil {
		t.Fatal(err)
	}
	opts := realkubelet.Options{NodeName: s.name, Server: cp.Config, Token: nodeToken(s.name), Verbosity: 4}
	if s.opts != nil {
		s.opts(&opts)
	}
	if n.kubelet, err = realkubelet.New(opts); err != nil {
		t.Fatal(err)
	}
	n.vendorDir = filepath.Join(n.kubelet.Dir, "..", "vendor")
	if err := os.MkdirAll(n.vendorDir, 0o750); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		n.stopExporter()
		n.stopProxy()
		n.mu.Lock()
		for _, v := range n.vendors {
			v.Stop()
		}
		n.mu.Unlock()
		if t.Failed() {
			t.Logf("kubelet %s, last lines of its log:\n%s", s.name, n.kubelet.Log(40))
		}
		n.kubelet.Close()
	})
	if err := n.kubelet.Start(); err != nil {
		t.Fatal(err)
	}
	n.waitReady()
	n.startInformer()
	if !s.noProxy {
		n.startProxy()
	}
	for _, r := range []string{gpuRes, rdmaRes, vfRes} {
		n.startVendor(r)
	}
	n.startExporter()
	return n
}

// startInformer watches the node's pods, as the proxy's binary does.
func (n *node) startInformer() {
	ctx, cancel := context.WithCancel(context.Background())
	n.t.Cleanup(cancel)
	f := informers.NewSharedInformerFactoryWithOptions(n.cp.Kube, 0, informers.WithTweakListOptions(func(o *metav1.ListOptions) {
		o.FieldSelector = fields.OneTermEqualSelector("spec.nodeName", n.spec.name).String()
	}))
	n.lister = f.Core().V1().Pods().Lister()
	f.Start(ctx.Done())
	f.WaitForCacheSync(ctx.Done())
}

func (n *node) waitReady() {
	n.t.Helper()
	n.poll(fmt.Sprintf("node %s Ready", n.spec.name), 60*time.Second, func(ctx context.Context) bool {
		nd, err := n.cp.Kube.CoreV1().Nodes().Get(ctx, n.spec.name, metav1.GetOptions{})
		if err != nil {
			return false
		}
		for _, c := range nd.Status.Conditions {
			if c.Type == corev1.NodeReady {
				return c.Status == corev1.ConditionTrue
			}
		}
		return false
	})
}

// waitAllocatable waits until the Node offers want devices of res.
func (n *node) waitAllocatable(res string, want int) {
	n.t.Helper()
	n.poll(fmt.Sprintf("node %s allocatable %s=%d", n.spec.name, res, want), 60*time.Second, func(ctx context.Context) bool {
		nd, err := n.cp.Kube.CoreV1().Nodes().Get(ctx, n.spec.name, metav1.GetOptions{})
		if err != nil {
			return false
		}
		q := nd.Status.Allocatable[corev1.ResourceName(res)]
		return q.Value() == int64(want)
	})
}

func (n *node) poll(what string, timeout time.Duration, cond func(ctx context.Context) bool) {
	n.t.Helper()
	if err := wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		return cond(ctx), nil
	}); err != nil {
		n.t.Fatalf("waiting for %s: %v\nkubelet log:\n%s", what, err, n.kubelet.Log(30))
	}
}

// devicesOf are the vendor plugin devices of a resource on this node,
// with the NUMA topology the NVIDIA and SR-IOV plugins report.
func (n *node) devicesOf(res string) []*pluginapi.Device {
	dev := func(id string, numa int) *pluginapi.Device {
		d := &pluginapi.Device{ID: id, Health: pluginapi.Healthy}
		if numa >= 0 {
			d.Topology = &pluginapi.TopologyInfo{Nodes: []*pluginapi.NUMANode{{ID: int64(numa)}}}
		}
		return d
	}
	var out []*pluginapi.Device
	switch res {
	case gpuRes:
		for i, g := range n.topo.GPUs {
			out = append(out, dev(gpualloc.GPUID(n.topo, i), topology.NUMAOf(g.PCI)))
		}
	case vfRes:
		for _, nic := range n.topo.NICs {
			for _, vf := range nic.VFs {
				out = append(out, dev(vf, topology.NUMAOf(nic.PCI)))
			}
		}
	case rdmaRes:
		// The RDMA shared device plugin: one resource, many slots.
		for i := range 16 {
			out = append(out, dev(fmt.Sprintf("rdma-%d", i), -1))
		}
	}
	return out
}

// startVendor starts the stand-in vendor plugin of res: GPUs with the
// NVIDIA device plugin's preference (go-gpuallocator best effort), VFs and
// RDMA slots with none, as the SR-IOV and RDMA shared plugins. GPUs and
// VFs register with the proxy (unless the node has none), RDMA with the
// kubelet.
func (n *node) startVendor(res string) {
	n.t.Helper()
	devs := n.devicesOf(res)
	if len(devs) == 0 {
		return
	}
	o := realkubelet.VendorOptions{Dir: n.vendorDir, Resource: res, Devices: devs}
	if n.spec.noProxy || res == rdmaRes {
		o.Dir = n.kubelet.DevicePluginDir
	}
	if res == gpuRes {
		o.Prefer = func(available, must []string, size int) []string {
			// The kubelet sends the free devices in map order, and
			// go-gpuallocator breaks ties between equal GPU sets by that
			// order: sorted, the choice is the simulated kubelet's.
			available = slices.Sorted(slices.Values(available))
			return gpualloc.BestEffortIDs(n.topo, available, must, size)
		}
		o.Env = func(ids []string) map[string]string {
			return map[string]string{"NVIDIA_VISIBLE_DEVICES": strings.Join(ids, ",")}
		}
	}
	v, err := realkubelet.StartVendor(o)
	if err != nil {
		n.t.Fatal(err)
	}
	n.mu.Lock()
	n.vendors[res] = v
	n.mu.Unlock()
}

func (n *node) restartVendor(res string) {
	n.t.Helper()
	n.mu.Lock()
	v := n.vendors[res]
	n.mu.Unlock()
	v.Stop()
	n.startVendor(res)
}

// startProxy runs the allocation proxy as its binary does: plans from an
// informer on the node's pods, holdings from the kubelet's podresources.
func (n *node) startProxy() {
	n.t.Helper()
	src, err := podresources.Dial(n.kubelet.PodResourcesSocket, 2*time.Second)
	if err != nil {
		n.t.Fatal(err)
	}
	cfg := allocproxy.Config{KubeletDir: n.kubelet.DevicePluginDir, VendorDir: n.vendorDir,
		Kinds:   map[string]allocproxy.Kind{gpuRes: allocproxy.KindGPU, vfRes: allocproxy.KindVF},
		Timeout: 2 * time.Second, CallTimeout: 10 * time.Second, Poll: 100 * time.Millisecond, NodeName: n.spec.name}
	cfg.SetNICs(n.topo)
	if n.spec.proxy != nil {
		n.spec.proxy(&cfg)
	}
	ctx, cancel := context.WithCancel(context.Background())
	broadcaster := record.NewBroadcaster(record.WithContext(ctx))
	broadcaster.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: n.cp.Kube.CoreV1().Events("")})
	recorder := broadcaster.NewRecorder(scheme.Scheme, corev1.EventSource{Component: "nicaffinity-allocation-proxy", Host: n.spec.name})
	p := allocproxy.New(cfg, allocproxy.PodPlans{Node: n.spec.name, Lister: n.lister}, allocproxy.PodResourcesHeld{Source: src}, recorder, nil)
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer broadcaster.Shutdown()
		defer src.Close()
		if err := p.Run(ctx); err != nil && ctx.Err() == nil {
			n.t.Errorf("allocation proxy on %s: %v", n.spec.name, err)
		}
	}()
	n.mu.Lock()
	n.proxy, n.stopProx = p, func() { cancel(); <-done }
	n.mu.Unlock()
}

func (n *node) stopProxy() {
	n.mu.Lock()
	stop := n.stopProx
	n.stopProx = nil
	n.mu.Unlock()
	if stop != nil {
		stop()
	}
}

// startExporter runs the real exporter against the kubelet's podresources.
func (n *node) startExporter() {
	n.t.Helper()
	if err := realkubelet.WaitSocket(context.Background(), n.kubelet.PodResourcesSocket); err != nil {
		n.t.Fatal(err)
	}
	src, err := podresources.Dial(n.kubelet.PodResourcesSocket, 5*time.Second)
	if err != nil {
		n.t.Fatal(err)
	}
	cfg := exporter.DefaultConfig(n.spec.name)
	cfg.MinWriteInterval, cfg.ResyncPeriod, cfg.MaxBackoff = 100*time.Millisecond, 2*time.Second, time.Second
	cfg.Resources.SRIOV = []string{vfRes}
	client, err := exporter.NewClient(n.cp.Config)
	if err != nil {
		n.t.Fatal(err)
	}
	exp := exporter.New(cfg, n.disc, src, client, exporter.ApplyPublisher{Client: client}, nil)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer src.Close()
		_ = exp.Run(ctx)
	}()
	n.mu.Lock()
	n.stopExp = func() { cancel(); <-done }
	n.mu.Unlock()
}

func (n *node) stopExporter() {
	n.mu.Lock()
	stop := n.stopExp
	n.stopExp = nil
	n.mu.Unlock()
	if stop != nil {
		stop()
	}
}

// snapshot is what the kubelet's podresources server says now, waiting
// (up to a minute) for a restarted kubelet to serve it.
func (n *node) snapshot() devices.Snapshot {
	n.t.Helper()
	var snap devices.Snapshot
	var last error
	n.poll("podresources on "+n.spec.name, 60*time.Second, func(ctx context.Context) bool {
		snap, last = n.trySnapshot(ctx)
		return last == nil
	})
	return snap
}

func (n *node) trySnapshot(ctx context.Context) (devices.Snapshot, error) {
	src, err := podresources.Dial(n.kubelet.PodResourcesSocket, 5*time.Second)
	if err != nil {
		return devices.Snapshot{}, err
	}
	defer src.Close()
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	return src.Snapshot(ctx)
}

// waitDevices waits until the kubelet's podresources offers want healthy
// devices of res: its device plugins (again) registered.
func (n *node) waitDevices(res string, want int) {
	n.t.Helper()
	n.poll(fmt.Sprintf("%d %s devices in podresources on %s", want, res, n.spec.name), 60*time.Second, func(ctx context.Context) bool {
		snap, err := n.trySnapshot(ctx)
		return err == nil && len(devices.IDs(snap.Allocatable, res)) == want
	})
}

// held is the device IDs of res the kubelet lists for a pod, sorted.
func (n *node) held(snap devices.Snapshot, pod, res string) []string {
	for _, p := range snap.Pods {
		if p.Namespace == "default" && p.Name == pod {
			ids := devices.IDs(p.Devices, res)
			slices.Sort(ids)
			return slices.Compact(ids)
		}
	}
	return nil
}

func (e *env) waitNRT(t *testing.T, node string) *v1alpha2.NodeResourceTopology {
	t.Helper()
	var out *v1alpha2.NodeResourceTopology
	if err := wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, 60*time.Second, true, func(ctx context.Context) (bool, error) {
		o, err := e.cp.NRT.TopologyV1alpha2().NodeResourceTopologies().Get(ctx, node, metav1.GetOptions{})
		out = o
		return err == nil, nil
	}); err != nil {
		t.Fatalf("no NodeResourceTopology for %s: %v", node, err)
	}
	return out
}

// podSpec is one pod to submit.
type podSpec struct {
	name      string
	gpus      int64
	rdma      bool
	vfs       int64
	scheduler string // default: nicaffinity's
	node      string // bind directly (no scheduler)
	// initGPUs, when set, gives the pod an init container taking that many GPUs.
	initGPUs int64
}

func (e *env) submit(t *testing.T, ps podSpec) {
	t.Helper()
	if ps.scheduler == "" {
		ps.scheduler = sched
	}
	limits := corev1.ResourceList{}
	if ps.gpus > 0 {
		limits[gpuRes] = *resource.NewQuantity(ps.gpus, resource.DecimalSI)
	}
	if ps.rdma {
		limits[rdmaRes] = resource.MustParse("1")
	}
	if ps.vfs > 0 {
		limits[vfRes] = *resource.NewQuantity(ps.vfs, resource.DecimalSI)
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: ps.name, Namespace: "default"},
		Spec: corev1.PodSpec{SchedulerName: ps.scheduler, NodeName: ps.node,
			Containers: []corev1.Container{{Name: "train", Image: "train", Resources: corev1.ResourceRequirements{Limits: limits, Requests: limits}}}},
	}
	if ps.initGPUs > 0 {
		il := corev1.ResourceList{gpuRes: *resource.NewQuantity(ps.initGPUs, resource.DecimalSI)}
		pod.Spec.InitContainers = []corev1.Container{{Name: "warmup", Image: "warmup", Resources: corev1.ResourceRequirements{Limits: il, Requests: il}}}
	}
	if _, err := e.cp.Kube.CoreV1().Pods("default").Create(context.Background(), pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

func (e *env) pod(t *testing.T, name string) *corev1.Pod {
	t.Helper()
	p, err := e.cp.Kube.CoreV1().Pods("default").Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// waitPhase waits until a pod reaches one of the phases.
func (e *env) waitPhase(t *testing.T, name string, phases ...corev1.PodPhase) *corev1.Pod {
	t.Helper()
	var pod *corev1.Pod
	if err := wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, 90*time.Second, true, func(ctx context.Context) (bool, error) {
		p, err := e.cp.Kube.CoreV1().Pods("default").Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		pod = p
		return slices.Contains(phases, p.Status.Phase), nil
	}); err != nil {
		msg := ""
		if pod != nil {
			msg = fmt.Sprintf("node %q, phase %q, reason %q: %s", pod.Spec.NodeName, pod.Status.Phase, pod.Status.Reason, pod.Status.Message)
		}
		msg += e.events(name)
		t.Fatalf("pod %s did not reach %v (%s): %v", name, phases, msg, err)
	}
	return pod
}

// waitBound waits until the scheduler bound a pod, and returns it.
func (e *env) waitBound(t *testing.T, name string) *corev1.Pod {
	t.Helper()
	var pod *corev1.Pod
	if err := wait.PollUntilContextTimeout(context.Background(), 20*time.Millisecond, 60*time.Second, true, func(ctx context.Context) (bool, error) {
		p, err := e.cp.Kube.CoreV1().Pods("default").Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		pod = p
		return p.Spec.NodeName != "", nil
	}); err != nil {
		msg := ""
		msg += e.events(name)
		t.Fatalf("pod %s not bound: %v%s", name, err, msg)
	}
	return pod
}

func (e *env) delete(t *testing.T, name string) {
	t.Helper()
	ctx := context.Background()
	if err := e.cp.Kube.CoreV1().Pods("default").Delete(ctx, name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
	if err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 60*time.Second, true, func(ctx context.Context) (bool, error) {
		_, err := e.cp.Kube.CoreV1().Pods("default").Get(ctx, name, metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	}); err != nil {
		t.Fatalf("pod %s not gone: %v", name, err)
	}
}

// plan is a pod's plan, parsed.
func plan(t *testing.T, pod *corev1.Pod) annotations.Allocation {
	t.Helper()
	a, err := annotations.ParseAllocation(pod.Annotations[annotations.AllocationKey])
	if err != nil {
		t.Fatalf("pod %s: no plan: %v", pod.Name, err)
	}
	return a
}

// observed waits for the exporter's verdict on a pod.
func (e *env) observed(t *testing.T, name string) annotations.Observed {
	t.Helper()
	var out annotations.Observed
	var perr error
	if err := wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		p, err := e.cp.Kube.CoreV1().Pods("default").Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		v, ok := p.Annotations[annotations.ObservedKey]
		if ok {
			perr = json.Unmarshal([]byte(v), &out)
		}
		return ok, nil
	}); err != nil || perr != nil {
		t.Fatalf("no observation for %s: %v %v", name, err, perr)
	}
	return out
}

// waitSynced waits until the node's object carries the fingerprint of the
// pods the kubelet lists now, as many allocatable GPUs as it offers and as
// many available as its pods leave: the exporter has caught up with it.
func (e *env) waitSynced(t *testing.T, n *node) *v1alpha2.NodeResourceTopology {
	t.Helper()
	var obj *v1alpha2.NodeResourceTopology
	n.poll("the exporter's object on "+n.spec.name+" to match the kubelet's pods", 60*time.Second, func(ctx context.Context) bool {
		snap, err := n.trySnapshot(ctx)
		if err != nil {
			return false
		}
		o, err := e.cp.NRT.TopologyV1alpha2().NodeResourceTopologies().Get(ctx, n.spec.name, metav1.GetOptions{})
		if err != nil {
			return false
		}
		obj = o
		// The fingerprint names pods only: the kubelet lists a pod while it
		// admits it, before it holds devices, so the devices count too.
		var alloc, avail int64
		for _, z := range o.Zones {
			for _, r := range z.Resources {
				if z.Type == nrt.ZoneNode && r.Name == gpuRes { // GPU zones count them again
					alloc += r.Allocatable.Value()
					avail += r.Available.Value()
				}
			}
		}
		offered, held := int64(len(devices.IDs(snap.Allocatable, gpuRes))), int64(0)
		for _, p := range snap.Pods {
			held += int64(len(devices.IDs(p.Devices, gpuRes)))
		}
		return nrt.AttrValue(o.Attributes, podfingerprint.Attribute) == nrt.Fingerprint(snap.Pods) &&
			alloc == offered && avail == max(offered-held, 0)
	})
	return obj
}

// proxyAnswers are the proxy's GetPreferredAllocation results so far, for
// failure messages.
func (n *node) proxyAnswers() string {
	n.mu.Lock()
	p := n.proxy
	n.mu.Unlock()
	if p == nil {
		return "no proxy"
	}
	var out []string
	for _, r := range []string{"plan", allocproxy.ReasonNoPlan, allocproxy.ReasonTaken, "unknown-device-ids", allocproxy.ReasonMustInclude, "bad-plan", allocproxy.ReasonVendorFailed} {
		if v := testutil.ToFloat64(p.Metrics().Preferred.WithLabelValues(gpuRes, r)); v > 0 {
			out = append(out, fmt.Sprintf("%s=%v", r, v))
		}
	}
	return strings.Join(out, " ")
}

// events lists a pod's Events, one per line, for failure messages.
func (e *env) events(pod string) string {
	evs, err := e.cp.Kube.CoreV1().Events("default").List(context.Background(), metav1.ListOptions{FieldSelector: "involvedObject.name=" + pod})
	if err != nil {
		return "\n  (events: " + err.Error() + ")"
	}
	var b strings.Builder
	for _, ev := range evs.Items {
		fmt.Fprintf(&b, "\n  event %s: %s", ev.Reason, ev.Message)
	}
	return b.String()
}
