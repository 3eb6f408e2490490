package nicaffinity

import (
	"context"
	"fmt"
	"maps"
	"sync"
	"sync/atomic"
	"time"

	"github.com/k8stopologyawareschedwg/noderesourcetopology-api/pkg/apis/topology/v1alpha2"
	"github.com/k8stopologyawareschedwg/podfingerprint"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/tools/cache"
	resourcehelper "k8s.io/component-helpers/resource"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"

	"github.com/nicaffinity/nicaffinity/pkg/annotations"
	"github.com/nicaffinity/nicaffinity/pkg/nrt"
)

// Cache is the plugin's view of the nodes' NodeResourceTopology objects.
//
// An object is compiled (nrt.Compile) once when it changes. For each node
// the cache publishes an immutable nodeView: the compiled object minus
// what this scheduler reserved and the object does not count yet, with the
// answers to common requests precomputed. Filter and Score read views
// without a lock and without allocating.
//
// Invariants:
//   - Writers (object events, Reserve, Unreserve, expiry, node deletion)
//     hold mu and publish each change as a new view; a view is never
//     modified once published.
//   - cells maps each known node to the cell holding its current view. The
//     map itself is replaced whole, only when a node appears or goes, so
//     readers load one pointer and never race a writer; a node's later
//     views go into its cell.
//   - A reservation is dropped when the node's object carries the pod-set
//     fingerprint of the pods the scheduler sees on that node (the exporter
//     counted them), when the pod goes away, or after the timeout.
//   - A node's entry, its cell and its reservations go when its object or
//     its Node is deleted, so a cluster that replaces nodes does not grow
//     the cache.
type Cache struct {
	mu      sync.Mutex
	nodes   map[string]*nodeEntry
	podNode map[types.UID]string
	cells   atomic.Pointer[map[string]*atomic.Pointer[nodeView]]
	// spread tells PreScore when every node scores alike (spread.go).
	spread scoreSpread
	// precompute fills each new view's answers (the plugin sets it).
	precompute func(*nodeView)
	timeout    time.Duration
	// maxAge: see Args.TopologyMaxAge (0: off).
	maxAge time.Duration
	now    func() time.Time

	gpuResource string
	// Set when the cache follows informers (newInformerCache).
	pods cache.Indexer
	// schedulerName is the profile's: only its pods' plans are adopted.
	schedulerName string
	// metrics count under the profile's name.
	metrics profileMetrics
}

type reservation struct {
	gpus nrt.GPUSet
	vfs  map[int]map[string]int64
	at   time.Time
}

type nodeEntry struct {
	compiled *nrt.Compiled
	err      string
	reserved map[types.UID]reservation
	// expires is when the oldest reservation runs out (zero: none), kept by
	// rebuild so the sweep checks one time per node.
	expires time.Time
	// view is the published view, counted in the spread.
	view *nodeView
	// rv is the resourceVersion of the object last set, and received is
	// when this scheduler first saw that version, on its own clock: the
	// node's clock (the heartbeat it writes) never decides freshness.
	rv       string
	received time.Time
	// outdated says why the object is too old to trust ("" while it is
	// current): no new version of it arrived for longer than maxAge.
	outdated string
	// state is the node's topology_nodes label ("" while it has no object).
	state string
}

// NewStaticCache is a cache over fixed objects, with no informers: for
// benchmarks and tools that run the plugin outside a scheduler. Nothing
// sweeps its reservations; they last until Unreserve.
func NewStaticCache(args *Args, objs ...*v1alpha2.NodeResourceTopology) *Cache {
	c := newCache(args.ReservationTimeout.Duration, args.GPUResourceName, "static")
	c.maxAge = args.TopologyMaxAge.Duration
	for _, o := range objs {
		compiled, err := nrt.Compile(o, args.GPUResourceName)
		c.set(o.Name, o.ResourceVersion, compiled, err, false)
	}
	return c
}

// newCache is an empty cache whose metrics count under profile.
func newCache(timeout time.Duration, gpuResource, profile string) *Cache {
	registerMetrics()
	c := &Cache{nodes: map[string]*nodeEntry{}, podNode: map[types.UID]string{}, timeout: timeout, now: time.Now, gpuResource: gpuResource,
		metrics: profileMetrics{profile: profile}}
	c.cells.Store(&map[string]*atomic.Pointer[nodeView]{})
	return c
}

// view is the node's published view, nil if it has none. Filter and Score
// call it for every node of every cycle.
func (c *Cache) view(node string) *nodeView {
	if cell := (*c.cells.Load())[node]; cell != nil {
		return cell.Load()
	}
	return nil
}

// View is the node's view, or nil and why the node has no usable object.
func (c *Cache) View(node string) (*nodeView, string) {
	v := c.view(node)
	switch {
	case v == nil || (v.c == nil && v.why == ""):
		return nil, "no NodeResourceTopology for this node"
	case v.c == nil:
		return nil, "NodeResourceTopology " + v.why
	}
	return v, ""
}

// uniformScore is the score every counted node gives a common request, if
// they all give the same (kinds: spread.go).
func (c *Cache) uniformScore(gpus, kind int) (int64, bool) { return c.spread.uniform(gpus, kind) }

func (c *Cache) entry(node string) *nodeEntry {
	e, ok := c.nodes[node]
	if !ok {
		e = &nodeEntry{reserved: map[types.UID]reservation{}}
		c.nodes[node] = e
	}
	return e
}

// expireDue drops reservations older than the timeout and marks objects
// of which no new version arrived for longer than maxAge, on every node. The informer-backed
// cache calls it on a ticker (sweepInterval) rather than checking the
// clock in every lookup: both limits are minutes, and the lookup runs for
// every node of every cycle.
func (c *Cache) expireDue() {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.now()
	for node, e := range c.nodes {
		if why := c.outdated(e, now); why != e.outdated {
			e.outdated = why
			if why != "" {
				klog.InfoS("NodeResourceTopology is not kept current; the node counts as topology unknown", "node", node, "reason", why)
			}
			c.rebuild(node)
		}
		if e.expires.IsZero() || !now.After(e.expires) {
			continue
		}
		for uid, r := range e.reserved {
			if now.Sub(r.at) > c.timeout {
				klog.InfoS("Dropping a reservation the NodeResourceTopology never confirmed", "node", node, "pod", uid, "age", now.Sub(r.at))
				delete(e.reserved, uid)
				delete(c.podNode, uid)
			}
		}
		c.rebuild(node)
	}
}

// outdated says why a node's object is too old to trust, or "": no new
// version of it reached this scheduler for longer than maxAge, by the
// scheduler's own clock. A live exporter writes a new version at least
// every resync period (its heartbeat attribute changes with every write),
// so only an object nobody keeps current goes stale, whatever time its
// heartbeat names: missing, in the future, or from a node whose clock is
// off (docs/nrt-schema.md, Freshness). The reason does not change while
// the object stays the same, so the sweep rebuilds and logs a node once
// when it goes stale, not on every pass.
func (c *Cache) outdated(e *nodeEntry, now time.Time) string {
	if e.compiled == nil || c.maxAge <= 0 || e.received.IsZero() {
		return ""
	}
	if now.Sub(e.received) > c.maxAge {
		return fmt.Sprintf("not refreshed by its exporter since %s (no new version for longer than topologyMaxAge %s)", e.received.UTC().Format(time.RFC3339), c.maxAge)
	}
	return ""
}

// sweepInterval is how often expireDue runs: a tenth of the timeout, at
// most every 10 s.
func sweepInterval(timeout time.Duration) time.Duration {
	return max(time.Second, min(10*time.Second, timeout/10))
}

// set stores a (re)compiled object of resourceVersion rv, or why it could
// not be compiled. confirmed: the object counts every pod on the node, so
// reservations go. A version not seen before restarts the object's age; a
// version seen before (an informer's relist) does not.
func (c *Cache) set(node, rv string, compiled *nrt.Compiled, err error, confirmed bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e := c.entry(node)
	e.compiled, e.err = compiled, ""
	if err != nil {
		e.compiled, e.err = nil, err.Error()
	}
	now := c.now()
	if rv == "" || rv != e.rv || e.received.IsZero() {
		e.rv, e.received = rv, now
	}
	e.outdated = c.outdated(e, now)
	if confirmed {
		for uid := range e.reserved {
			delete(c.podNode, uid)
		}
		clear(e.reserved)
	}
	c.rebuild(node)
}

// remove forgets a node: its object, its reservations and its cell.
func (c *Cache) remove(node string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.nodes[node]
	if !ok {
		return
	}
	for uid := range e.reserved {
		delete(c.podNode, uid)
	}
	c.spread.replace(e.view, nil)
	c.setState(e, "")
	delete(c.nodes, node)
	c.metrics.setReservations(len(c.podNode))
	cells := maps.Clone(*c.cells.Load())
	delete(cells, node)
	c.cells.Store(&cells)
}

// Reserve holds GPUs and VFs (per NIC index, per resource) for a pod.
func (c *Cache) Reserve(node string, pod types.UID, gpus nrt.GPUSet, vfs map[int]map[string]int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.entry(node).reserved[pod] = reservation{gpus: gpus, vfs: vfs, at: c.now()}
	c.podNode[pod] = node
	c.rebuild(node)
}

// Unreserve drops the pod's reservation.
func (c *Cache) Unreserve(node string, pod types.UID) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.nodes[node]; ok {
		delete(e.reserved, pod)
		delete(c.podNode, pod)
		c.rebuild(node)
	}
}

// forgetPod drops a pod's reservations wherever they are.
func (c *Cache) forgetPod(pod types.UID) {
	c.mu.Lock()
	defer c.mu.Unlock()
	node, ok := c.podNode[pod]
	if !ok {
		return
	}
	delete(c.podNode, pod)
	if e := c.nodes[node]; e != nil {
		delete(e.reserved, pod)
		c.rebuild(node)
	}
}

// rebuild publishes a new view of a node: the object's free GPUs and VFs
// minus reservations. The caller holds mu.
func (c *Cache) rebuild(node string) {
	e := c.nodes[node]
	e.expires = time.Time{}
	for _, r := range e.reserved {
		if at := r.at.Add(c.timeout); e.expires.IsZero() || at.Before(e.expires) {
			e.expires = at
		}
	}
	v := &nodeView{}
	switch {
	case e.outdated != "":
		v.why, v.state = "is stale: "+e.outdated, stateStale
	case e.compiled != nil:
		v = c.compose(e)
		v.state = stateUsable
	case e.err != "":
		v.why, v.state = "cannot be read: "+e.err, stateUnreadable
	}
	c.spread.replace(e.view, v)
	e.view = v
	c.setState(e, stateOf(e))
	c.metrics.setReservations(len(c.podNode))
	cell := (*c.cells.Load())[node]
	if cell == nil {
		cell = &atomic.Pointer[nodeView]{}
		cells := maps.Clone(*c.cells.Load())
		cells[node] = cell
		cell.Store(v)
		c.cells.Store(&cells)
		return
	}
	cell.Store(v)
}

// stateOf is a node's topology_nodes state.
func stateOf(e *nodeEntry) string {
	switch {
	case e.outdated != "":
		return stateStale
	case e.compiled != nil:
		return stateUsable
	case e.err != "":
		return stateUnreadable
	}
	return ""
}

// setState moves a node between the topology_nodes gauges.
func (c *Cache) setState(e *nodeEntry, state string) {
	if e.state == state {
		return
	}
	c.metrics.moveNode(e.state, state)
	e.state = state
}

func (c *Cache) compose(e *nodeEntry) *nodeView {
	comp := e.compiled
	v := &nodeView{c: comp, free: comp.Free, vfFree: map[string][]int64{}, stale: len(e.reserved) > 0}
	for n, nic := range comp.NICs {
		for res, free := range nic.VFs {
			if v.vfFree[res] == nil {
				v.vfFree[res] = make([]int64, len(comp.NICs))
			}
			v.vfFree[res][n] = free
		}
	}
	for _, r := range e.reserved {
		v.free &^= r.gpus
		for n, byRes := range r.vfs {
			for res, k := range byRes {
				if v.vfFree[res] != nil && n < len(v.vfFree[res]) {
					v.vfFree[res][n] = max(0, v.vfFree[res][n]-k)
				}
			}
		}
	}
	if c.precompute != nil {
		c.precompute(v)
	}
	return v
}

// setPrecompute installs the plugin's answers and rebuilds the views made
// before it.
func (c *Cache) setPrecompute(f func(*nodeView)) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.precompute = f
	for node := range c.nodes {
		c.rebuild(node)
	}
}

const nodeNameIndex = "nicaffinity.io/spec.nodeName"

// newInformerCache feeds a cache from an NRT informer and the scheduler's
// pod and node informers.
func newInformerCache(ctx context.Context, h fwk.Handle, args *Args) (*Cache, error) {
	// Objects come in unstructured, so that their quantities are checked
	// as strings (nrt.Decode) before anything parses them.
	client, err := dynamic.NewForConfig(h.KubeConfig())
	if err != nil {
		return nil, err
	}
	disco, err := discovery.NewDiscoveryClientForConfig(h.KubeConfig())
	if err != nil {
		return nil, err
	}
	if err := waitForCRD(ctx, disco, crdWait, 2*time.Second); err != nil {
		return nil, err
	}
	c := newCache(args.ReservationTimeout.Duration, args.GPUResourceName, h.ProfileName())
	c.maxAge = args.TopologyMaxAge.Duration
	c.schedulerName = h.ProfileName()
	podInformer := h.SharedInformerFactory().Core().V1().Pods().Informer()
	// The fingerprint check lists the pods of one node; an index keeps it
	// O(pods on the node). If the informer already runs, fall back to a scan.
	if err := podInformer.AddIndexers(cache.Indexers{nodeNameIndex: func(obj interface{}) ([]string, error) {
		if p, ok := obj.(*v1.Pod); ok && p.Spec.NodeName != "" {
			return []string{p.Spec.NodeName}, nil
		}
		return nil, nil
	}}); err != nil {
		klog.FromContext(ctx).Info("Pod informer already started; fingerprint checks will scan all pods", "err", err)
	}
	c.pods = podInformer.GetIndexer()
	if _, err := podInformer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		// Plans outlive the scheduler that made them: a restarted scheduler,
		// or another replica, holds what bound pods were planned to get
		// until the node's object counts them.
		AddFunc:    func(obj interface{}) { c.adoptPlan(obj) },
		UpdateFunc: func(_, obj interface{}) { c.adoptPlan(obj) },
		DeleteFunc: func(obj interface{}) {
			if p, ok := deletedObject(obj).(*v1.Pod); ok {
				c.forgetPod(p.UID)
			}
		},
	}); err != nil {
		return nil, err
	}
	if _, err := h.SharedInformerFactory().Core().V1().Nodes().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		DeleteFunc: func(obj interface{}) {
			if n, ok := deletedObject(obj).(*v1.Node); ok {
				c.remove(n.Name)
			}
		},
	}); err != nil {
		return nil, err
	}

	factory := dynamicinformer.NewDynamicSharedInformerFactory(client, 0)
	informer := factory.ForResource(nrtGVR).Informer()
	if _, err := informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj interface{}) { c.update(obj) },
		UpdateFunc: func(_, obj interface{}) { c.update(obj) },
		DeleteFunc: func(obj interface{}) {
			if o, ok := deletedObject(obj).(*unstructured.Unstructured); ok {
				c.remove(o.GetName())
			}
		},
	}); err != nil {
		return nil, err
	}
	factory.Start(ctx.Done())
	for typ, ok := range factory.WaitForCacheSync(ctx.Done()) {
		if !ok {
			return nil, fmt.Errorf("NodeResourceTopology informer (%v) did not sync", typ)
		}
	}
	go func() {
		tick := time.NewTicker(sweepInterval(args.ReservationTimeout.Duration))
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
				c.expireDue()
			}
		}
	}()
	return c, nil
}

// crdWait is how long the scheduler waits at start for the
// NodeResourceTopology CRD to be served (installed beside it) before it
// gives up with an error that says what is missing.
const crdWait = time.Minute

// waitForCRD polls discovery until the NodeResourceTopology resource is
// served, for at most wait.
func waitForCRD(ctx context.Context, disco discovery.DiscoveryInterface, wait, every time.Duration) error {
	gv := nrtGVR.GroupVersion().String()
	deadline := time.Now().Add(wait)
	for {
		list, err := disco.ServerResourcesForGroupVersion(gv)
		if err == nil {
			for _, r := range list.APIResources {
				if r.Name == nrtGVR.Resource {
					return nil
				}
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the NodeResourceTopology CRD (%s.%s, version %s) is not served after %s: install manifests/crds (or the CRD of NFD or scheduler-plugins) first: %v",
				nrtGVR.Resource, nrtGVR.Group, nrtGVR.Version, wait, err)
		}
		klog.FromContext(ctx).Info("Waiting for the NodeResourceTopology CRD to be served", "groupVersion", gv, "err", err)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(every):
		}
	}
}

// deletedObject unwraps an informer's tombstone.
func deletedObject(obj interface{}) interface{} {
	if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		return t.Obj
	}
	return obj
}

// adoptPlan reserves the planned GPUs of a bound pod this cache holds no
// reservation for, unless the node's object already counts the pod.
//
// A plan is a claim on a node's GPUs, so it is adopted only from a pod of
// this scheduler and only up to the GPUs the pod requests: a tenant who
// writes the annotation on a pod of its own (admission refuses that too,
// docs/security.md) cannot hold a node's GPUs.
func (c *Cache) adoptPlan(obj interface{}) {
	p, ok := obj.(*v1.Pod)
	if !ok || p.Spec.NodeName == "" || p.Status.Phase == v1.PodSucceeded || p.Status.Phase == v1.PodFailed {
		return
	}
	if p.Spec.SchedulerName != c.schedulerName {
		return
	}
	s, ok := p.Annotations[annotations.AllocationKey]
	if !ok {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.nodes[p.Spec.NodeName]
	if !ok || e.compiled == nil {
		return
	}
	if _, held := e.reserved[p.UID]; held {
		return // most updates are of pods this scheduler reserved itself
	}
	plan, err := annotations.ParseAllocation(s)
	if err != nil || plan.Node != p.Spec.NodeName {
		return
	}
	requested := resourcehelper.PodRequests(p, resourcehelper.PodResourcesOptions{})[v1.ResourceName(c.gpuResource)]
	if int64(len(plan.GPUs)) > requested.Value() {
		klog.InfoS("Ignoring a plan larger than the pod's request", "pod", klog.KObj(p), "planned", len(plan.GPUs), "requested", requested.Value())
		return
	}
	if e.compiled.Fingerprint != "" && e.compiled.Fingerprint == c.fingerprintOf(plan.Node) {
		return // the object counts every pod on the node
	}
	var gpus nrt.GPUSet
	for _, bus := range plan.GPUs {
		for g, gpu := range e.compiled.GPUs {
			if gpu.BusID == bus {
				gpus |= nrt.GPUSet(1) << g
			}
		}
	}
	if gpus == 0 {
		return
	}
	e.reserved[p.UID] = reservation{gpus: gpus, at: c.now()}
	c.podNode[p.UID] = plan.Node
	c.rebuild(plan.Node)
}

// nrtGVR is the NodeResourceTopology resource the exporter publishes.
var nrtGVR = v1alpha2.SchemeGroupVersion.WithResource("noderesourcetopologies")

// update takes an object event, from the plugin's informer or from a
// queueing hint: unstructured objects are decoded with their quantities
// checked first (nrt.Decode); a version already held is skipped.
func (c *Cache) update(obj interface{}) {
	if o, ok := obj.(*v1alpha2.NodeResourceTopology); ok {
		c.observe(o)
		return
	}
	u, ok := obj.(*unstructured.Unstructured)
	if !ok || c.has(u.GetName(), u.GetResourceVersion()) {
		return
	}
	o, err := nrt.Decode(u)
	if err != nil {
		klog.InfoS("NodeResourceTopology cannot be read; the node counts as topology unknown", "node", u.GetName(), "err", err)
		c.set(u.GetName(), u.GetResourceVersion(), nil, err, false)
		return
	}
	c.observe(o)
}

// has reports whether the node's view was built from this version of its
// object.
func (c *Cache) has(node, resourceVersion string) bool {
	v := c.view(node)
	return v != nil && v.c != nil && resourceVersion != "" && v.c.ResourceVersion == resourceVersion
}

// observe compiles an object unless its version is already in.
func (c *Cache) observe(o *v1alpha2.NodeResourceTopology) {
	if c.has(o.Name, o.ResourceVersion) {
		return
	}
	compiled, err := nrt.Compile(o, c.gpuResource)
	if err != nil {
		klog.InfoS("NodeResourceTopology cannot be read; the node counts as topology unknown", "node", o.Name, "err", err)
	}
	confirmed := compiled != nil && compiled.Fingerprint != "" && c.pods != nil && compiled.Fingerprint == c.fingerprintOf(o.Name)
	c.set(o.Name, o.ResourceVersion, compiled, err, confirmed)
}

// fingerprintOf computes the pod-set fingerprint of the pods the scheduler
// sees on a node, as the exporter does from the kubelet's list.
func (c *Cache) fingerprintOf(node string) string {
	objs, err := c.pods.ByIndex(nodeNameIndex, node)
	if err != nil {
		objs = nil
		for _, o := range c.pods.List() {
			if p, ok := o.(*v1.Pod); ok && p.Spec.NodeName == node {
				objs = append(objs, p)
			}
		}
	}
	fp := podfingerprint.NewFingerprint(len(objs))
	for _, o := range objs {
		p, ok := o.(*v1.Pod)
		if !ok || p.Status.Phase == v1.PodSucceeded || p.Status.Phase == v1.PodFailed {
			continue
		}
		_ = fp.Add(p.Namespace, p.Name)
	}
	return fp.Sign()
}
