package nicaffinity

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/k8stopologyawareschedwg/noderesourcetopology-api/pkg/apis/topology/v1alpha2"
	nrtclient "github.com/k8stopologyawareschedwg/noderesourcetopology-api/pkg/generated/clientset/versioned"
	nrtinformers "github.com/k8stopologyawareschedwg/noderesourcetopology-api/pkg/generated/informers/externalversions"
	"github.com/k8stopologyawareschedwg/podfingerprint"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"

	"github.com/nicaffinity/nicaffinity/pkg/annotations"
	"github.com/nicaffinity/nicaffinity/pkg/nrt"
)

// Cache is the plugin's view of NodeResourceTopology objects.
//
// Objects are compiled (nrt.Compile) once when they change; View hands out
// immutable per-node views that Filter and Score read without locking or
// allocating. The cache also holds what this scheduler reserved and the
// objects do not show yet: a reservation is dropped when the node's object
// carries the pod-set fingerprint of the pods the scheduler sees on that node
// (the exporter counted them), when the pod goes away, or after
// ReservationTimeout.
type Cache interface {
	// View returns the node's view, or nil and why the node has no usable object.
	View(node string) (*nodeView, string)
	// lookup is View for the hot path: what was published for the node.
	lookup(node string) hotView
	// uniformScore is the score every counted node gives a common
	// request, if they all give the same (kinds: spread.go).
	uniformScore(gpus, kind int) (int64, bool)
	// Reserve holds GPUs and VFs (per NIC index, per resource) for a pod.
	Reserve(node string, pod types.UID, gpus nrt.GPUSet, vfs map[int]map[string]int64)
	// Unreserve drops the pod's reservation.
	Unreserve(node string, pod types.UID)
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
	view     *nodeView
	// expires is when the oldest reservation runs out (zero: none), kept by
	// rebuild so View checks one time, not every reservation.
	expires time.Time
	// hot is what was last published, counted in the store's spread.
	hot hotView
}

// store is the cache's state, shared by the informer-backed cache and tests.
//
// Writers (object updates, Reserve, Unreserve) serialize on mu and publish
// each node's new view into views; View, which Filter and Score call for
// every node of every cycle from many goroutines, reads views without
// taking mu, so a writer never stalls the scheduling cycle.
type store struct {
	mu    sync.RWMutex
	nodes map[string]*nodeEntry
	// views finds each node's published view without the lock (viewindex.go).
	views viewIndex
	// spread tells PreScore when every node scores alike (spread.go).
	spread  scoreSpread
	podNode map[types.UID]string
	// precompute fills each new view's answers (the plugin sets it).
	precompute func(*nodeView)
	timeout    time.Duration
	now        func() time.Time
}

// published is what View hands out for a node, replaced whole by rebuild.
type published struct {
	view *nodeView
	why  string
}

// NewStaticCache is a cache over fixed objects, with no informers: for
// benchmarks and tools that run the plugin outside a scheduler. Nothing
// sweeps its reservations; they last until Unreserve.
func NewStaticCache(args *Args, objs ...*v1alpha2.NodeResourceTopology) Cache {
	st := newStore(args.ReservationTimeout.Duration)
	for _, o := range objs {
		c, err := nrt.Compile(o, args.GPUResourceName)
		st.set(o.Name, c, err, false)
	}
	return st
}

func newStore(timeout time.Duration) *store {
	return &store{nodes: map[string]*nodeEntry{}, podNode: map[types.UID]string{}, timeout: timeout, now: time.Now}
}

func (s *store) entry(node string) *nodeEntry {
	e, ok := s.nodes[node]
	if !ok {
		e = &nodeEntry{reserved: map[types.UID]reservation{}}
		s.nodes[node] = e
	}
	return e
}

// View implements Cache.
func (s *store) View(node string) (*nodeView, string) {
	return s.lookup(node).viewOrWhy()
}

// lookup implements Cache: the node's published view (pub nil if none was
// ever published).
func (s *store) lookup(node string) hotView {
	return s.views.load(node)
}

// uniformScore implements Cache.
func (s *store) uniformScore(gpus, kind int) (int64, bool) { return s.spread.uniform(gpus, kind) }

// expireDue drops reservations older than the timeout on every node. The
// informer-backed cache calls it on a ticker (sweepInterval) rather than
// checking the clock on every lookup: the timeout is minutes, and the
// lookup runs for every node of every cycle.
func (s *store) expireDue() {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	for node, e := range s.nodes {
		if !e.expires.IsZero() && now.After(e.expires) {
			s.expire(node)
		}
	}
}

// sweepInterval is how often expireDue runs: a tenth of the timeout, at
// most every 10 s.
func sweepInterval(timeout time.Duration) time.Duration {
	return max(time.Second, min(10*time.Second, timeout/10))
}

// viewOrWhy is the view, or nil and why the node has no usable object.
func (p *published) viewOrWhy() (*nodeView, string) {
	switch {
	case p == nil || (p.view == nil && p.why == ""):
		return nil, "no NodeResourceTopology for this node"
	case p.view == nil:
		return nil, "NodeResourceTopology cannot be read: " + p.why
	}
	return p.view, ""
}

func (s *store) expire(node string) {
	e := s.nodes[node]
	for uid, r := range e.reserved {
		if s.now().Sub(r.at) > s.timeout {
			klog.InfoS("Dropping a reservation the NodeResourceTopology never confirmed", "node", node, "pod", uid, "age", s.now().Sub(r.at))
			delete(e.reserved, uid)
			delete(s.podNode, uid)
		}
	}
	s.rebuild(node)
}

// set stores a (re)compiled object, or why it could not be compiled.
func (s *store) set(node string, c *nrt.Compiled, err error, confirmed bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.entry(node)
	e.compiled, e.err = c, ""
	if err != nil {
		e.compiled, e.err = nil, err.Error()
	}
	if confirmed {
		for uid := range e.reserved {
			delete(s.podNode, uid)
		}
		e.reserved = map[types.UID]reservation{}
	}
	s.rebuild(node)
}

func (s *store) remove(node string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if e, ok := s.nodes[node]; ok {
		e.compiled, e.err = nil, ""
		s.rebuild(node)
	}
}

// Reserve implements Cache.
func (s *store) Reserve(node string, pod types.UID, gpus nrt.GPUSet, vfs map[int]map[string]int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.entry(node).reserved[pod] = reservation{gpus: gpus, vfs: vfs, at: s.now()}
	s.podNode[pod] = node
	s.rebuild(node)
}

// Unreserve implements Cache.
func (s *store) Unreserve(node string, pod types.UID) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if e, ok := s.nodes[node]; ok {
		delete(e.reserved, pod)
		delete(s.podNode, pod)
		s.rebuild(node)
	}
}

// forgetPod drops a pod's reservations wherever they are.
func (s *store) forgetPod(pod types.UID) {
	s.mu.Lock()
	defer s.mu.Unlock()
	node, ok := s.podNode[pod]
	if !ok {
		return
	}
	delete(s.podNode, pod)
	if e := s.nodes[node]; e != nil {
		delete(e.reserved, pod)
		s.rebuild(node)
	}
}

// rebuild makes a new immutable view: the object's free GPUs and VFs minus reservations.
func (s *store) rebuild(node string) {
	e := s.nodes[node]
	e.expires = time.Time{}
	for _, r := range e.reserved {
		if at := r.at.Add(s.timeout); e.expires.IsZero() || at.Before(e.expires) {
			e.expires = at
		}
	}
	defer func() {
		hot := makeHotView(&published{view: e.view, why: e.err})
		s.spread.replace(e.hot, hot)
		e.hot = hot
		s.views.store(node, hot)
	}()
	if e.compiled == nil {
		e.view = nil
		return
	}
	c := e.compiled
	v := &nodeView{c: c, free: c.Free, vfFree: map[string][]int64{}, stale: len(e.reserved) > 0}
	for n, nic := range c.NICs {
		for res, free := range nic.VFs {
			if v.vfFree[res] == nil {
				v.vfFree[res] = make([]int64, len(c.NICs))
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
	if s.precompute != nil {
		s.precompute(v)
	}
	e.view = v
}

// setPrecompute installs the plugin's answers and rebuilds the views made
// before it.
func (s *store) setPrecompute(f func(*nodeView)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.precompute = f
	for node := range s.nodes {
		s.rebuild(node)
	}
}

// informerCache feeds the store from an NRT informer and the scheduler's pod informer.
type informerCache struct {
	*store
	gpuResource string
	pods        cache.Indexer
}

const nodeNameIndex = "nicaffinity.io/spec.nodeName"

func newInformerCache(ctx context.Context, h fwk.Handle, args *Args) (*informerCache, error) {
	cfg := rest.CopyConfig(h.KubeConfig())
	cfg.ContentType, cfg.AcceptContentTypes = "application/json", "application/json"
	client, err := nrtclient.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	c := &informerCache{store: newStore(args.ReservationTimeout.Duration), gpuResource: args.GPUResourceName}
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
			if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = t.Obj
			}
			if p, ok := obj.(*v1.Pod); ok {
				c.forgetPod(p.UID)
			}
		},
	}); err != nil {
		return nil, err
	}

	factory := nrtinformers.NewSharedInformerFactory(client, 0)
	informer := factory.Topology().V1alpha2().NodeResourceTopologies().Informer()
	if _, err := informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj interface{}) { c.update(obj) },
		UpdateFunc: func(_, obj interface{}) { c.update(obj) },
		DeleteFunc: func(obj interface{}) {
			if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = t.Obj
			}
			if o, ok := obj.(*v1alpha2.NodeResourceTopology); ok {
				c.remove(o.Name)
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

// adoptPlan reserves the planned GPUs of a bound pod this cache holds no
// reservation for, unless the node's object already counts the pod.
func (c *informerCache) adoptPlan(obj interface{}) {
	p, ok := obj.(*v1.Pod)
	if !ok || p.Spec.NodeName == "" || p.Status.Phase == v1.PodSucceeded || p.Status.Phase == v1.PodFailed {
		return
	}
	s, ok := p.Annotations[annotations.AllocationKey]
	if !ok {
		return
	}
	// Most updates are of pods this scheduler reserved itself: check that
	// under the read lock, so Filter goroutines are not held up.
	c.mu.RLock()
	e, ok := c.nodes[p.Spec.NodeName]
	held := ok && e.reserved[p.UID].gpus != 0
	c.mu.RUnlock()
	if !ok || held {
		return
	}
	plan, err := annotations.ParseAllocation(s)
	if err != nil || plan.Node != p.Spec.NodeName {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if e.compiled == nil {
		return
	}
	if _, held := e.reserved[p.UID]; held {
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

func (c *informerCache) update(obj interface{}) {
	if o, ok := obj.(*v1alpha2.NodeResourceTopology); ok {
		c.observe(o)
	}
}

// observe compiles an object unless its version is already in. The
// scheduler's queue sees NRT events through its own informer: the queueing
// hint calls observe so the cache is never older than the event that
// requeues a pod.
func (c *informerCache) observe(o *v1alpha2.NodeResourceTopology) {
	c.mu.RLock()
	e, ok := c.nodes[o.Name]
	seen := ok && e.compiled != nil && o.ResourceVersion != "" && e.compiled.ResourceVersion == o.ResourceVersion
	c.mu.RUnlock()
	if seen {
		return
	}
	compiled, err := nrt.Compile(o, c.gpuResource)
	if err != nil {
		klog.InfoS("NodeResourceTopology cannot be read; the node counts as topology unknown", "node", o.Name, "err", err)
	}
	confirmed := compiled != nil && compiled.Fingerprint != "" && compiled.Fingerprint == c.fingerprintOf(o.Name)
	c.set(o.Name, compiled, err, confirmed)
}

// fingerprintOf computes the pod-set fingerprint of the pods the scheduler
// sees on a node, as the exporter does from the kubelet's list.
func (c *informerCache) fingerprintOf(node string) string {
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
