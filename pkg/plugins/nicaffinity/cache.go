package nicaffinity

import (
	"fmt"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/k8stopologyawareschedwg/noderesourcetopology-api/pkg/apis/topology/v1alpha2"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	"github.com/nicaffinity/nicaffinity/pkg/nrt"
	"github.com/nicaffinity/nicaffinity/pkg/placement"
)

// Cache is the plugin's store of the nodes' NodeResourceTopology objects:
// compiled objects, reservations and the views built from them. It knows
// no informers, no CRD and no pod objects: the informer edge
// (informers.go) decodes objects and plans and hands it plain values.
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
//   - cells maps each known node to the cell holding its current view
//     (cells.go): readers take no lock; a node's cell is added when it
//     appears, removed when it goes, and its later views go into the cell.
//   - A reservation is dropped when the node's object carries the pod-set
//     fingerprint of the pods the scheduler sees on that node (the exporter
//     counted them) and its pod is one of those, when the pod goes away, or
//     after the timeout. A pod reserved but not yet seen bound is in no
//     node's set: an object that matches the set without it does not count
//     it, and dropping its reservation would hand its GPUs out twice.
//   - A node's entry, its cell and its reservations go when its object or
//     its Node is deleted, so a cluster that replaces nodes does not grow
//     the cache.
type Cache struct {
	mu    sync.Mutex
	nodes map[string]*nodeEntry
	// handled are the object versions the feed has finished with, its
	// requeue of turned-down pods included (versions).
	handled map[string]string
	podNode map[types.UID]string
	cells   *cellMap
	// spread tells PreScore when every node scores alike (spread.go).
	spread scoreSpread
	// skip tells PreFilter when Filter would add nothing (skip.go).
	skip skipCounts
	// caps tells PreFilter when no node could ever align a request
	// (unalignable.go).
	caps alignCaps
	// vfIndex are the nodes offering each VF resource (nodeset.go).
	vfIndex atomic.Pointer[vfNodeIndex]
	// scoring fills each new view's answers.
	scoring *scoring
	timeout time.Duration
	// maxAge: see Args.TopologyMaxAge (0: off).
	maxAge time.Duration
	now    func() time.Time

	gpuResource string
	// metrics count under the profile's name.
	metrics profileMetrics
	// jobs are the rails each multi-pod job's pods hold (jobs.go).
	jobs *jobRails
	// railNodes counts the nodes that publish each rail name
	// (railtrust.go); under mu.
	railNodes map[string]int
}

// storeConfig is what a Cache is made with (Args.storeConfig).
type storeConfig struct {
	timeout, maxAge time.Duration
	gpuResource     string
	// profile labels the metrics.
	profile string
	// scoring precomputes views' answers (nil: none, and no Filter skips).
	scoring *scoring
	// staleRejects: Filter rejects views with reservations the object
	// does not show yet (staleTopology: Reject).
	staleRejects bool
}

type reservation struct {
	gpus nrt.GPUSet
	vfs  map[int]map[string]int64
	at   time.Time
}

type nodeEntry struct {
	compiled *nrt.Compiled
	// vfBase are compiled's free VFs per resource and NIC (vfBase): the
	// start of every view of it, which views share and never write.
	vfBase   map[string][]int64
	err      string
	reserved map[types.UID]reservation
	// released are the GPUs of pods that ended (deleted, or Succeeded or
	// Failed) while the object still showed them in use, as the exporter
	// observed them: the view counts them free until the node's next
	// object, which the exporter writes within its debounce of the pod's
	// end, so that the scheduler's books (which free them at once) and
	// the view agree in between. They bridge the object of version rv
	// only: set drops them with any newer version.
	released map[types.UID]reservation
	// foreign are the pods another scheduler bound here that take GPUs and
	// that no object since counted, by pod, with when this scheduler saw
	// them bound and their namespace/name: which GPUs the kubelet hands
	// them nobody here can know until the exporter says, so a plan made
	// now may name them (docs/scheduler.md, Two schedulers on one node).
	// They go when an object counts them, when they end, or after the
	// reservation timeout.
	foreign map[types.UID]foreignPod
	// rails are the rail names the object publishes (railtrust.go).
	rails []string
	// expires is when the oldest reservation, release or foreign pod runs
	// out (zero: none), kept by rebuild so the sweep checks one time per
	// node.
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
	// vfIndexed is what the VF index holds the node under (nil: nothing).
	vfIndexed *nodeEntryVFs
}

// NewStaticCache is a cache over fixed objects, with no informers: for
// benchmarks and tools that run the plugin outside a scheduler. Nothing
// sweeps its reservations; they last until Unreserve.
// args must be defaulted and valid.
func NewStaticCache(args *Args, objs ...*v1alpha2.NodeResourceTopology) *Cache {
	c := newCache(storeConfigOf(args, "static"))
	for _, o := range objs {
		compiled, err := nrt.Compile(o, args.GPUResourceName)
		c.set(o.Name, o.ResourceVersion, compiled, err, nil)
		c.markHandled(o.Name, o.ResourceVersion)
	}
	return c
}

// newCache is an empty cache.
func newCache(cfg storeConfig) *Cache {
	c := &Cache{nodes: map[string]*nodeEntry{}, handled: map[string]string{}, podNode: map[types.UID]string{}, cells: newCellMap(), timeout: cfg.timeout, maxAge: cfg.maxAge, now: time.Now,
		gpuResource: cfg.gpuResource, metrics: newProfileMetrics(cfg.profile), scoring: cfg.scoring, jobs: newJobRails(), railNodes: map[string]int{}}
	c.vfIndex.Store(&vfNodeIndex{})
	c.skip.li, c.skip.staleRejects, c.skip.raced = -1, cfg.staleRejects, map[types.UID]struct{}{}
	if cfg.scoring != nil {
		c.skip.li = placement.LevelIndex(cfg.scoring.defaults.MaxLevel)
	}
	return c
}

// view is the node's published view, nil if it has none. Filter and Score
// call it for every node of every cycle.
func (c *Cache) view(node string) *nodeView {
	if cell := c.cells.load(node); cell != nil {
		return cell.Load()
	}
	return nil
}

// View is the node's view, or nil and why the node has no usable object.
func (c *Cache) View(node string) (*nodeView, string) { return usable(c.view(node)) }

// usable is v if it can be used, else nil and why not. Callers that need
// the raw view too (Filter counts why it rejects) look it up once and call
// this.
func usable(v *nodeView) (*nodeView, string) {
	switch {
	case v == nil || (v.C == nil && v.why == ""):
		return nil, "no NodeResourceTopology for this node"
	case v.C == nil:
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
		for uid, r := range e.released {
			if now.Sub(r.at) > c.timeout {
				klog.InfoS("Counting an ended pod's GPUs in use again: no new NodeResourceTopology came", "node", node, "pod", uid, "age", now.Sub(r.at))
				delete(e.released, uid)
			}
		}
		for uid, f := range e.foreign {
			if now.Sub(f.at) > c.timeout {
				klog.InfoS("No NodeResourceTopology counted another scheduler's pod; planning on this node again", "node", node, "pod", f.key, "age", now.Sub(f.at))
				delete(e.foreign, uid)
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

// foreignPod is a pod of another scheduler waiting to be counted.
type foreignPod struct {
	key string
	at  time.Time
}

// awaitForeign notes that another scheduler bound pod (key
// namespace/name) to node with GPUs, and the node's object does not count
// it yet.
func (c *Cache) awaitForeign(node string, pod types.UID, key string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.nodes[node]
	if !ok || e.compiled == nil {
		return // no object to plan on: nothing a plan could collide with
	}
	if _, ok := e.foreign[pod]; ok {
		return
	}
	if e.foreign == nil {
		e.foreign = map[types.UID]foreignPod{}
	}
	e.foreign[pod] = foreignPod{key: key, at: c.now()}
	c.rebuild(node)
}

// forgetForeign drops a foreign pod that ended or went.
func (c *Cache) forgetForeign(node string, pod types.UID) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e := c.nodes[node]; e != nil {
		if _, ok := e.foreign[pod]; ok {
			delete(e.foreign, pod)
			c.rebuild(node)
		}
	}
}

// set stores a (re)compiled object of resourceVersion rv, or why it could
// not be compiled. counted: the pods the object counts (nil: none known),
// whose reservations go. A version not seen before restarts the object's
// age; a version seen before (an informer's relist) does not.
func (c *Cache) set(node, rv string, compiled *nrt.Compiled, err error, counted map[types.UID]bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e := c.entry(node)
	e.compiled, e.err, e.vfBase = compiled, "", nil
	if err != nil {
		e.compiled, e.err = nil, err.Error()
	}
	if e.compiled != nil {
		e.vfBase = placement.VFBase(e.compiled)
	}
	c.setRails(e, nodeRails(e.compiled))
	now := c.now()
	if rv == "" || rv != e.rv {
		e.released = nil // a newer object: it counts the ended pods or not, as it is
	}
	if rv == "" || rv != e.rv || e.received.IsZero() {
		e.rv, e.received = rv, now
	}
	e.outdated = c.outdated(e, now)
	c.dropCounted(e, counted)
	c.rebuild(node)
}

// dropCounted drops the reservations of the pods an object counts, and
// with any counted set (the object counts the node's pods as the scheduler
// sees them, so no ended pod) the releases. The caller holds mu and
// rebuilds the node.
func (c *Cache) dropCounted(e *nodeEntry, counted map[types.UID]bool) {
	if counted != nil {
		e.released = nil
	}
	for uid := range e.reserved {
		if counted[uid] {
			delete(e.reserved, uid)
			delete(c.podNode, uid)
		}
	}
	for uid := range e.foreign {
		if counted[uid] {
			delete(e.foreign, uid)
		}
	}
}

// remove forgets a node: its object, its reservations and its cell.
func (c *Cache) remove(node string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.handled, node)
	e, ok := c.nodes[node]
	if !ok {
		return
	}
	for uid := range e.reserved {
		delete(c.podNode, uid)
	}
	c.setRails(e, nil)
	c.spread.replace(e.view, nil)
	c.skip.replace(e.view, nil)
	c.caps.replace(e.view, nil)
	c.indexVFs(node, e, nil)
	c.nodesChanged()
	c.setState(e, "")
	delete(c.nodes, node)
	c.metrics.setReservations(len(c.podNode))
	c.cells.remove(node)
}

// Reserve holds GPUs and VFs (per NIC index, per resource) for a pod.
func (c *Cache) Reserve(node string, pod types.UID, gpus nrt.GPUSet, vfs map[int]map[string]int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.entry(node).reserved[pod] = reservation{gpus: gpus, vfs: vfs, at: c.now()}
	c.podNode[pod] = node
	c.rebuild(node)
}

// reservedGPUs are the GPUs this scheduler has reserved on node, whether
// or not its object shows them in use yet.
func (c *Cache) reservedGPUs(node string) nrt.GPUSet {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out nrt.GPUSet
	if e, ok := c.nodes[node]; ok {
		for _, r := range e.reserved {
			out |= r.gpus
		}
	}
	return out
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

// forgetPod drops a pod's reservations wherever they are, and its place in
// its job's rails.
func (c *Cache) forgetPod(pod types.UID) {
	c.jobs.drop(pod)
	c.mu.Lock()
	defer c.mu.Unlock()
	c.forgetRaced(pod)
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
	for _, held := range []map[types.UID]reservation{e.reserved, e.released} {
		for _, r := range held {
			if at := r.at.Add(c.timeout); e.expires.IsZero() || at.Before(e.expires) {
				e.expires = at
			}
		}
	}
	for _, f := range e.foreign {
		if at := f.at.Add(c.timeout); e.expires.IsZero() || at.Before(e.expires) {
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
	c.skip.replace(e.view, v)
	c.caps.replace(e.view, v)
	c.indexVFs(node, e, v)
	e.view = v
	c.setState(e, stateOf(e))
	c.metrics.setReservations(len(c.podNode))
	cell := c.cells.load(node)
	if cell == nil {
		cell = &atomic.Pointer[nodeView]{}
		cell.Store(v)
		c.cells.add(node, cell)
		c.nodesChanged()
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

// compose is a node's view: its object's free GPUs and VFs, plus the
// releases, minus the reservations. Views share the object's VF counts
// (vfBase) unless a reservation holds VFs.
func (c *Cache) compose(e *nodeEntry) *nodeView {
	comp := e.compiled
	v := &nodeView{Node: placement.Node{C: comp, Free: comp.Free, VFFree: e.vfBase}, stale: len(e.reserved) > 0}
	for _, r := range e.released {
		v.Free |= r.gpus & comp.Healthy
	}
	vfsHeld := false
	for _, r := range e.reserved {
		v.Free &^= r.gpus
		vfsHeld = vfsHeld || len(r.vfs) > 0
	}
	if vfsHeld {
		v.VFFree = make(map[string][]int64, len(e.vfBase))
		for res, free := range e.vfBase {
			v.VFFree[res] = slices.Clone(free)
		}
		for _, r := range e.reserved {
			for n, byRes := range r.vfs {
				for res, k := range byRes {
					if v.VFFree[res] != nil && n < len(v.VFFree[res]) {
						v.VFFree[res][n] = max(0, v.VFFree[res][n]-k)
					}
				}
			}
		}
	}
	for _, f := range e.foreign {
		if v.foreign == "" || f.key < v.foreign {
			v.foreign = f.key // the first by name: views of one state say the same
		}
	}
	if c.scoring != nil {
		c.scoring.precompute(v)
	}
	return v
}

// release counts free, in node's view, the GPUs gpus of a pod that ended,
// while the node's object is the version rv: the one the caller found not
// to count the node's pods as the scheduler now sees them (so it may still
// count the ended pod). Only GPUs that object shows in use are released;
// a reservation still takes them back (compose frees, then reserves).
func (c *Cache) release(node, rv string, pod types.UID, gpus nrt.GPUSet) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.nodes[node]
	if !ok || e.compiled == nil || rv == "" || e.rv != rv {
		return // a newer object came meanwhile: it knows
	}
	if gpus &^= e.compiled.Free; gpus == 0 {
		return
	}
	if e.released == nil {
		e.released = map[types.UID]reservation{}
	}
	e.released[pod] = reservation{gpus: gpus, at: c.now()}
	c.rebuild(node)
}

// holds reports whether the cache holds a reservation for pod.
func (c *Cache) holds(pod types.UID) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	_, ok := c.podNode[pod]
	return ok
}

// adopt reserves, for a bound pod this cache holds nothing for, the GPUs
// of node with the given bus IDs (its plan), unless the node's object
// already counts the pod: fingerprint is that of the pods the scheduler
// sees on the node. The edge checks who wrote the plan.
func (c *Cache) adopt(node string, pod types.UID, busIDs []string, fingerprint string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.nodes[node]
	if !ok || e.compiled == nil {
		return
	}
	if _, held := e.reserved[pod]; held {
		return
	}
	if e.compiled.Fingerprint != "" && e.compiled.Fingerprint == fingerprint {
		return // the object counts every pod on the node
	}
	var gpus nrt.GPUSet
	for _, bus := range busIDs {
		for g, gpu := range e.compiled.GPUs {
			if gpu.BusID == bus {
				gpus |= nrt.GPUSet(1) << g
			}
		}
	}
	if gpus == 0 {
		return
	}
	e.reserved[pod] = reservation{gpus: gpus, at: c.now()}
	c.podNode[pod] = node
	c.rebuild(node)
}

// reserving reports whether the cache holds reservations or releases on
// node: what an object that counts the node's pods would confirm.
func (c *Cache) reserving(node string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.nodes[node]
	return ok && len(e.reserved)+len(e.released)+len(e.foreign) > 0
}

// confirm drops the reservations of the pods in counted when node's
// object, still the one compiled, counts that pod set (fingerprint is the
// set's): the object holds those pods. Reservations of other pods (not yet
// seen bound) stay.
func (c *Cache) confirm(node, fingerprint string, counted map[types.UID]bool) (rebuilt bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.nodes[node]
	if !ok || e.compiled == nil || len(e.reserved)+len(e.released)+len(e.foreign) == 0 || e.compiled.Fingerprint == "" || e.compiled.Fingerprint != fingerprint {
		return false
	}
	n := len(e.reserved) + len(e.released) + len(e.foreign)
	if c.dropCounted(e, counted); len(e.reserved)+len(e.released)+len(e.foreign) != n {
		c.rebuild(node)
		return true
	}
	return false
}

// versions is the resourceVersion of each node's object in the cache.
func (c *Cache) versions() map[string]string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return maps.Clone(c.handled)
}

// markHandled records that the feed is done with node's object at rv:
// stored, and the pods it may make room for requeued. A harness that
// waits for the plugin to hold a version (versions) must not see it
// between the two, or it could call a moment settled before the requeue.
func (c *Cache) markHandled(node, rv string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.nodes[node]; !ok {
		delete(c.handled, node)
		return
	}
	c.handled[node] = rv
}

// compiledFingerprint is the pod-set fingerprint of node's compiled
// object ("" without one).
func (c *Cache) compiledFingerprint(node string) string {
	if v := c.view(node); v != nil && v.C != nil {
		return v.C.Fingerprint
	}
	return ""
}

// has reports whether the node's view was built from this version of its
// object.
func (c *Cache) has(node, resourceVersion string) bool {
	v := c.view(node)
	return v != nil && v.C != nil && resourceVersion != "" && v.C.ResourceVersion == resourceVersion
}
