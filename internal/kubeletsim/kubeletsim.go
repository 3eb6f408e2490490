// Package kubeletsim is a simulated kubelet for one node: it registers the
// Node with GPU, RDMA and VF capacity, hands devices to pods bound to it the
// way the kubelet and device plugins do (the NVIDIA device plugin's allocator
// from go-gpuallocator, or first-fit), marks them Running, and serves the real
// podresources gRPC API on a unix socket, so the real exporter runs unchanged
// against it.
package kubeletsim

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"sync"

	"github.com/NVIDIA/go-gpuallocator/gpuallocator"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/retry"
	resourcehelper "k8s.io/component-helpers/resource"
	"k8s.io/dynamic-resource-allocation/resourceclaim"
	"k8s.io/klog/v2"

	"github.com/nicaffinity/nicaffinity/internal/drasim"
	"github.com/nicaffinity/nicaffinity/internal/gpualloc"
	"github.com/nicaffinity/nicaffinity/internal/podresourcessim"
	"github.com/nicaffinity/nicaffinity/pkg/allocproxy"
	"github.com/nicaffinity/nicaffinity/pkg/annotations"
	"github.com/nicaffinity/nicaffinity/pkg/devices"
	"github.com/nicaffinity/nicaffinity/pkg/dra"
	"github.com/nicaffinity/nicaffinity/pkg/topology"
)

// GPU allocation policies.
const (
	// BestEffort is the NVIDIA device plugin's default: the GPU set with the
	// best links among its GPUs (NVLink, then PCIe closeness), blind to NICs.
	BestEffort = "best-effort"
	// FirstFit takes the lowest-numbered free GPUs.
	FirstFit = "first-fit"
	// Planned takes the GPUs the scheduler planned (nicaffinity.io/allocation)
	// when they are free, else falls back to BestEffort: a device plugin whose
	// preferred allocation honours the plan.
	Planned = "planned"
	// Proxy runs nicaffinity's allocation proxy (pkg/allocproxy's Choose)
	// between the kubelet and a BestEffort device plugin: the proxy, not
	// the simulation, finds which plan a request is for, knowing only its
	// size and the available devices, as on a real node.
	Proxy = "proxy"
	// DRA has no device plugins: stand-ins of the NVIDIA GPU DRA driver
	// and of a NIC driver publish the node's GPUs and NICs as
	// ResourceSlices (internal/drasim, NICs shared between claims), the
	// scheduler's DynamicResources plugin allocates, and the kubelet hands
	// a pod the devices its allocated claims hold.
	DRA = "dra"
)

// Config describes one simulated node.
type Config struct {
	Name     string
	Topology *topology.Topology
	// Socket is where the podresources API is served.
	Socket string
	Policy string
	// GPUResource, RDMAResource (shared, RDMASlots units) and SRIOVResource
	// (one unit per VF of the topology's NICs) name the device plugins' resources.
	GPUResource   string
	RDMAResource  string
	RDMASlots     int
	SRIOVResource string
}

// Assignment is what one pod got.
type Assignment struct {
	GPUs []int // positions in Topology.GPUs
	VFs  []string
	// NICs are the RDMA NICs (PFs) a pod holds through claims (DRA); a
	// device-plugin pod with rdma/hca may use every NIC and lists none.
	NICs []string
}

// Kubelet is a running simulated kubelet.
type Kubelet struct {
	cfg    Config
	kube   kubernetes.Interface
	server *podresourcessim.Server
	policy gpuallocator.Policy

	mu       sync.Mutex
	gpus     []*gpuallocator.Device
	freeGPU  []bool
	freeVF   map[string]bool
	assigned map[types.UID]Assignment
	keys     map[types.UID][2]string
	// pods lists the node's pods (Proxy: the candidates' source).
	pods corelisters.PodLister
	vfPF map[string]string
}

// GPUID is the device-plugin ID of GPU position i: its UUID, else its bus ID.
func GPUID(t *topology.Topology, i int) string { return gpualloc.GPUID(t, i) }

// New prepares a kubelet; Start runs it.
func New(cfg Config, kube kubernetes.Interface) (*Kubelet, error) {
	if cfg.Policy == "" {
		cfg.Policy = BestEffort
	}
	k := &Kubelet{cfg: cfg, kube: kube, server: podresourcessim.New(cfg.Socket), freeVF: map[string]bool{}, assigned: map[types.UID]Assignment{}, keys: map[types.UID][2]string{}}
	t := cfg.Topology
	k.gpus = gpualloc.Devices(t)
	for range t.GPUs {
		k.freeGPU = append(k.freeGPU, true)
	}
	switch cfg.Policy {
	case BestEffort:
		k.policy = gpuallocator.NewBestEffortPolicy()
	case FirstFit:
		k.policy = gpuallocator.NewSimplePolicy()
	case Planned, Proxy:
		k.policy = gpuallocator.NewBestEffortPolicy()
	case DRA:
	default:
		return nil, fmt.Errorf("node %s: GPU policy %q: want %s, %s, %s, %s or %s", cfg.Name, cfg.Policy, BestEffort, FirstFit, Planned, Proxy, DRA)
	}
	k.vfPF = map[string]string{}
	for _, n := range t.NICs {
		for _, vf := range n.VFs {
			k.vfPF[vf] = n.Name
			k.freeVF[vf] = true
		}
	}
	return k, nil
}

// Start registers the Node, serves podresources and admits pods until ctx ends.
func (k *Kubelet) Start(ctx context.Context) error {
	if err := k.register(ctx); err != nil {
		return err
	}
	if k.cfg.Policy == DRA {
		for _, s := range drasim.Slices(k.cfg.Name, k.cfg.Topology, drasim.WithSharedNICs()) {
			if _, err := k.kube.ResourceV1().ResourceSlices().Create(ctx, &s, metav1.CreateOptions{}); err != nil {
				return fmt.Errorf("node %s: publishing ResourceSlice %s: %w", k.cfg.Name, s.Name, err)
			}
		}
	}
	k.publish()
	if err := k.server.Start(); err != nil {
		return err
	}
	context.AfterFunc(ctx, k.server.Stop)
	factory := informers.NewSharedInformerFactoryWithOptions(k.kube, 0, informers.WithTweakListOptions(func(o *metav1.ListOptions) {
		o.FieldSelector = fields.OneTermEqualSelector("spec.nodeName", k.cfg.Name).String()
	}))
	inf := factory.Core().V1().Pods().Informer()
	k.mu.Lock()
	k.pods = factory.Core().V1().Pods().Lister()
	k.mu.Unlock()
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj interface{}) { k.admit(ctx, obj) },
		UpdateFunc: func(_, obj interface{}) { k.admit(ctx, obj) },
		DeleteFunc: func(obj interface{}) {
			if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = t.Obj
			}
			if p, ok := obj.(*corev1.Pod); ok {
				k.release(p.UID)
			}
		},
	}); err != nil {
		return err
	}
	factory.Start(ctx.Done())
	factory.WaitForCacheSync(ctx.Done())
	return nil
}

func (k *Kubelet) register(ctx context.Context) error {
	res := corev1.ResourceList{
		corev1.ResourceCPU: resource.MustParse("192"), corev1.ResourceMemory: resource.MustParse("2Ti"), corev1.ResourcePods: resource.MustParse("110"),
	}
	// With DRA no device plugin registers: the devices are the drivers'.
	if k.cfg.Policy != DRA {
		res[corev1.ResourceName(k.cfg.GPUResource)] = *resource.NewQuantity(int64(len(k.gpus)), resource.DecimalSI)
		if k.cfg.RDMAResource != "" {
			res[corev1.ResourceName(k.cfg.RDMAResource)] = *resource.NewQuantity(int64(k.cfg.RDMASlots), resource.DecimalSI)
		}
		if k.cfg.SRIOVResource != "" && len(k.freeVF) > 0 {
			res[corev1.ResourceName(k.cfg.SRIOVResource)] = *resource.NewQuantity(int64(len(k.freeVF)), resource.DecimalSI)
		}
	}
	node := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: k.cfg.Name, Labels: map[string]string{"kubernetes.io/hostname": k.cfg.Name, "nvidia.com/gpu.present": "true"}},
		Status: corev1.NodeStatus{Capacity: res, Allocatable: res,
			Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, LastHeartbeatTime: metav1.Now()}}},
	}
	_, err := k.kube.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{})
	return err
}

// publish tells the podresources server what is offered and held.
func (k *Kubelet) publish() {
	if k.cfg.Policy == DRA {
		return
	}
	var offered []devices.Device
	for i, g := range k.cfg.Topology.GPUs {
		offered = append(offered, devices.Device{Resource: k.cfg.GPUResource, ID: GPUID(k.cfg.Topology, i), NUMANodes: []int{topology.NUMAOf(g.PCI)}})
	}
	if k.cfg.RDMAResource != "" {
		offered = append(offered, devices.Device{Resource: k.cfg.RDMAResource, ID: "rdma-shared"})
	}
	for vf := range k.freeVF {
		offered = append(offered, devices.Device{Resource: k.cfg.SRIOVResource, ID: vf})
	}
	k.server.SetAllocatable(offered)
}

func (k *Kubelet) admit(ctx context.Context, obj interface{}) {
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return
	}
	if pod.DeletionTimestamp != nil {
		// The containers "stop" at once: free the devices and let the
		// object go, as the kubelet does after a graceful shutdown.
		k.release(pod.UID)
		if g := pod.DeletionGracePeriodSeconds; g != nil && *g == 0 {
			// Ours, or another's, immediate delete: the apiserver writes
			// the zero grace period, then removes the object. Deleting
			// again would only be refused (not found).
			return
		}
		zero := int64(0)
		if err := k.kube.CoreV1().Pods(pod.Namespace).Delete(ctx, pod.Name, metav1.DeleteOptions{GracePeriodSeconds: &zero}); err != nil && ctx.Err() == nil {
			klog.V(2).InfoS("Simulated kubelet could not finish deleting a pod", "pod", klog.KObj(pod), "err", err)
		}
		return
	}
	if pod.Status.Phase != corev1.PodPending && pod.Status.Phase != "" {
		return
	}
	var a Assignment
	var err error
	if k.cfg.Policy == DRA {
		// Read outside the lock: the claims are the scheduler's decision.
		a, err = k.claimed(ctx, pod)
	}
	k.mu.Lock()
	if _, done := k.assigned[pod.UID]; done {
		k.mu.Unlock()
		return
	}
	if k.cfg.Policy != DRA {
		a, err = k.allocate(pod)
	}
	if err == nil {
		k.assigned[pod.UID] = a
		k.keys[pod.UID] = [2]string{pod.Namespace, pod.Name}
		k.server.SetPod(pod.Namespace, pod.Name, k.devicesOf(pod, a))
	}
	k.mu.Unlock()
	admitErr := err
	// The pod is admitted once (assigned is set): its status must land, so
	// a conflict with another writer (the scheduler's condition, the
	// ResourceClaim controller's claim statuses) is retried on a fresh copy.
	status := pod.DeepCopy()
	err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if admitErr != nil {
			status.Status.Phase = corev1.PodFailed
			status.Status.Reason = "UnexpectedAdmissionError"
			status.Status.Message = admitErr.Error()
		} else {
			status.Status.Phase = corev1.PodRunning
			status.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}
		}
		_, err := k.kube.CoreV1().Pods(pod.Namespace).UpdateStatus(ctx, status, metav1.UpdateOptions{})
		if apierrors.IsConflict(err) {
			if fresh, getErr := k.kube.CoreV1().Pods(pod.Namespace).Get(ctx, pod.Name, metav1.GetOptions{}); getErr == nil {
				status = fresh
			}
		}
		return err
	})
	if err != nil && ctx.Err() == nil {
		klog.V(2).InfoS("Simulated kubelet could not update pod status", "pod", klog.KObj(pod), "err", err)
	}
}

// allocate picks devices for pod; k.mu is held.
func (k *Kubelet) allocate(pod *corev1.Pod) (Assignment, error) {
	var a Assignment
	want := podQuantity(pod, k.cfg.GPUResource)
	if want > 0 {
		var available []*gpuallocator.Device
		for i, d := range k.gpus {
			if k.freeGPU[i] {
				available = append(available, d)
			}
		}
		picked := k.planned(pod, int(want))
		if k.cfg.Policy == Proxy {
			picked = k.proxied(available, int(want))
		}
		if picked == nil {
			picked = k.policy.Allocate(available, nil, int(want))
		}
		if len(picked) != int(want) {
			return a, fmt.Errorf("node %s: %d GPUs requested, %d free", k.cfg.Name, want, len(available))
		}
		for _, d := range picked {
			a.GPUs = append(a.GPUs, d.Index)
		}
		sort.Ints(a.GPUs)
	}
	if vfs := podQuantity(pod, k.cfg.SRIOVResource); vfs > 0 && k.cfg.SRIOVResource != "" {
		var free []string
		for vf, ok := range k.freeVF {
			if ok {
				free = append(free, vf)
			}
		}
		sort.Strings(free)
		k.preferPlannedVFs(pod, free)
		if k.cfg.Policy == Proxy {
			ch := allocproxy.Choose(allocproxy.Request{Resource: k.cfg.SRIOVResource, Kind: allocproxy.KindVF, Available: free, Size: int(vfs)}, k.candidates(), k.vfPF)
			if ch.IDs != nil {
				free = ch.IDs
			}
		}
		if int64(len(free)) < vfs {
			return a, fmt.Errorf("node %s: %d VFs requested, %d free", k.cfg.Name, vfs, len(free))
		}
		a.VFs = free[:vfs]
	}
	for _, g := range a.GPUs {
		k.freeGPU[g] = false
	}
	for _, vf := range a.VFs {
		k.freeVF[vf] = false
	}
	return a, nil
}

// preferPlannedVFs moves VFs of the planned NICs' PFs to the front (Planned
// policy only); free is sorted otherwise.
func (k *Kubelet) preferPlannedVFs(pod *corev1.Pod, free []string) {
	if k.cfg.Policy != Planned {
		return
	}
	plan, err := annotations.ParseAllocation(pod.Annotations[annotations.AllocationKey])
	if err != nil || plan.Node != k.cfg.Name {
		return
	}
	near := map[string]bool{}
	for _, n := range k.cfg.Topology.NICs {
		for _, name := range plan.NICs {
			if n.Name == name {
				for _, vf := range n.VFs {
					near[vf] = true
				}
			}
		}
	}
	sort.SliceStable(free, func(i, j int) bool { return near[free[i]] && !near[free[j]] })
}

// candidates are the node's planned pods not admitted yet, as the
// allocation proxy sees them; k.mu is held.
func (k *Kubelet) candidates() []allocproxy.Candidate {
	if k.pods == nil {
		return nil
	}
	pods, err := k.pods.List(labels.Everything())
	if err != nil {
		return nil
	}
	var out []allocproxy.Candidate
	for _, p := range pods {
		if _, done := k.assigned[p.UID]; done {
			continue
		}
		if c, ok := allocproxy.CandidateOf(k.cfg.Name, p); ok {
			out = append(out, c)
		}
	}
	return out
}

// proxied is the allocation proxy's answer for a request of want GPUs
// from available: the devices of the plan it finds, nil for none (the
// device plugin's best effort then); k.mu is held.
func (k *Kubelet) proxied(available []*gpuallocator.Device, want int) []*gpuallocator.Device {
	var ids []string
	byID := map[string]*gpuallocator.Device{}
	for _, d := range available {
		ids = append(ids, d.UUID)
		byID[d.UUID] = d
	}
	ch := allocproxy.Choose(allocproxy.Request{Resource: k.cfg.GPUResource, Kind: allocproxy.KindGPU, Available: ids, Size: want}, k.candidates(), k.vfPF)
	if ch.IDs == nil {
		return nil
	}
	var out []*gpuallocator.Device
	for _, id := range ch.IDs {
		out = append(out, byID[id])
	}
	return out
}

// planned returns the pod's planned GPUs when the policy follows plans and
// they are all free; k.mu is held.
func (k *Kubelet) planned(pod *corev1.Pod, want int) []*gpuallocator.Device {
	if k.cfg.Policy != Planned {
		return nil
	}
	plan, err := annotations.ParseAllocation(pod.Annotations[annotations.AllocationKey])
	if err != nil || plan.Node != k.cfg.Name || len(plan.GPUs) != want {
		return nil
	}
	var out []*gpuallocator.Device
	for _, bus := range plan.GPUs {
		found := false
		for i, g := range k.cfg.Topology.GPUs {
			if g.PCI.Address == bus && k.freeGPU[i] {
				out = append(out, k.gpus[i])
				found = true
			}
		}
		if !found {
			return nil
		}
	}
	return out
}

func (k *Kubelet) devicesOf(pod *corev1.Pod, a Assignment) []devices.Device {
	if k.cfg.Policy == DRA {
		// Claimed devices are no device plugin's: the exporter reads them
		// from the claims.
		return nil
	}
	var out []devices.Device
	// The kubelet reports a device's NUMA node in List as in
	// GetAllocatableResources: the Node zones count held GPUs by it.
	for _, g := range a.GPUs {
		out = append(out, devices.Device{Resource: k.cfg.GPUResource, ID: GPUID(k.cfg.Topology, g), NUMANodes: []int{topology.NUMAOf(k.cfg.Topology.GPUs[g].PCI)}})
	}
	for _, vf := range a.VFs {
		out = append(out, devices.Device{Resource: k.cfg.SRIOVResource, ID: vf})
	}
	if k.cfg.RDMAResource != "" && podQuantity(pod, k.cfg.RDMAResource) > 0 {
		out = append(out, devices.Device{Resource: k.cfg.RDMAResource, ID: "rdma-shared"})
	}
	return out
}

func (k *Kubelet) release(uid types.UID) {
	k.mu.Lock()
	defer k.mu.Unlock()
	a, ok := k.assigned[uid]
	if !ok {
		return
	}
	for _, g := range a.GPUs {
		k.freeGPU[g] = true
	}
	for _, vf := range a.VFs {
		k.freeVF[vf] = true
	}
	key := k.keys[uid]
	delete(k.assigned, uid)
	delete(k.keys, uid)
	k.server.DeletePod(key[0], key[1])
}

// Assigned returns what a pod got (false if nothing yet).
func (k *Kubelet) Assigned(uid types.UID) (Assignment, bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	a, ok := k.assigned[uid]
	return a, ok
}

// Socket is the podresources socket path.
func (k *Kubelet) Socket() string { return k.cfg.Socket }

// podQuantity is what the pod requests of a resource (the scheduler's own
// accounting, component-helpers' PodRequests).
func podQuantity(pod *corev1.Pod, name string) int64 {
	if name == "" {
		return 0
	}
	q := resourcehelper.PodRequests(pod, resourcehelper.PodResourcesOptions{})[corev1.ResourceName(name)]
	return q.Value()
}

// claimed is what a pod's allocated claims hold on this node, as the DRA
// drivers' kubelet plugins prepare it: each claim (named in the spec, or
// generated from a template and recorded in the pod's status) must be
// allocated and reserved for the pod, as the scheduler leaves it before it
// binds. Devices are named as dratest publishes them.
func (k *Kubelet) claimed(ctx context.Context, pod *corev1.Pod) (Assignment, error) {
	var a Assignment
	gpuAt := map[string]int{}
	for i := range k.cfg.Topology.GPUs {
		gpuAt[drasim.GPUName(i)] = i
	}
	nicNamed := map[string]string{}
	for _, n := range k.cfg.Topology.NICs {
		if n.PhysFn == "" {
			nicNamed[drasim.NICName(n.Name)] = n.Name
		}
	}
	for i := range pod.Spec.ResourceClaims {
		name, _, err := resourceclaim.Name(pod, &pod.Spec.ResourceClaims[i])
		if err != nil {
			return a, fmt.Errorf("node %s: %w", k.cfg.Name, err)
		}
		if name == nil {
			continue // no claim needed
		}
		claim, err := k.kube.ResourceV1().ResourceClaims(pod.Namespace).Get(ctx, *name, metav1.GetOptions{})
		if err != nil {
			return a, fmt.Errorf("node %s: ResourceClaim %s: %w", k.cfg.Name, *name, err)
		}
		if claim.Status.Allocation == nil || !resourceclaim.IsReservedForPod(pod, claim, false) {
			return a, fmt.Errorf("node %s: ResourceClaim %s is not allocated and reserved for pod %s", k.cfg.Name, *name, pod.Name)
		}
		refs, _ := dra.Allocated(claim)
		for _, r := range refs {
			if r.Pool != k.cfg.Name {
				return a, fmt.Errorf("node %s: ResourceClaim %s holds %s, of another node", k.cfg.Name, *name, r)
			}
			switch r.Driver {
			case drasim.GPUDriver:
				if i, ok := gpuAt[r.Device]; ok && !slices.Contains(a.GPUs, i) {
					a.GPUs = append(a.GPUs, i)
				}
			case drasim.NICDriver:
				if n, ok := nicNamed[r.Device]; ok && !slices.Contains(a.NICs, n) {
					a.NICs = append(a.NICs, n)
				}
			}
		}
	}
	sort.Ints(a.GPUs)
	sort.Strings(a.NICs)
	return a, nil
}
