package nicaffinity

import (
	"sync/atomic"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	fwk "k8s.io/kube-scheduler/framework"
)

// Skipping Filter for pods whose answer every node already gives.
//
// Pods without RDMA and preferred pods pass every node: PreFilter returns
// Skip for them, as in-tree plugins do for pods they do not constrain.
//
// For a common RDMA request (the plugin's default level, required, no
// VFs, no rails), Filter on a node whose view is usable (and not stale
// under staleTopology: Reject) and whose healthy GPUs all have a NIC at
// the default level or closer passes exactly when the view has as many
// free GPUs as the pod asks for: the free GPUs NodeResourcesFit counts
// from the scheduler's own books. Call such a view safe. Safety looks at
// every healthy GPU, not only the free ones, so that it holds for any set
// of pods preemption might evict: a skipped Filter is skipped in
// preemption's what-ifs too. When every node of the
// cycle's snapshot that has GPUs has a safe view, Filter adds nothing to
// NodeResourcesFit, and PreFilter returns Skip: the framework then calls
// nothing of the plugin per node. Nodes without GPUs do not count, because
// NodeResourcesFit rejects them before Filter would run.
//
// Invariants that keep the decision O(1) a cycle and exact:
//   - the cache counts the views that are not safe as it publishes them
//     (skipCounts.unsafe: one load a cycle);
//   - whether every snapshot node with GPUs has a view is checked by one
//     pass over the snapshot's node list, remembered (skipMemo) until that
//     list is rebuilt (the framework makes a new one when a node joins or
//     leaves) or the cache's epoch moves: a view appears or goes, or a
//     Node's GPU count changes.
//
// The scheduler's books and the cache's views can still disagree for a
// moment (an object that lags its node's pods, a Node that gained GPUs
// before its object arrived). So Reserve runs Filter's check on the node
// chosen in a skipped cycle; a node that fails it fails the cycle with
// Filter's reason, and that pod's later cycles do not skip.

// maxRaced bounds the pods remembered as having failed Reserve's check
// after a skipped Filter; past it no pod skips until some are forgotten.
const maxRaced = 1024

// skipCounts is the cache's side: what makes a view safe, how many are not,
// and the epoch of the set of nodes with views.
type skipCounts struct {
	// li is the default level's index; -1: the cache never says skip.
	li           int
	staleRejects bool
	unsafe       atomic.Int64
	epoch        atomic.Uint64
	// raced are pods whose skipped cycle failed Reserve's check (under the
	// cache's mu); racedN is their number, read without the lock.
	raced  map[types.UID]struct{}
	racedN atomic.Int32
}

// safe: Filter on v, or on v with any GPUs freed, passes a common RDMA
// request exactly when the view has that many free GPUs.
func (sc *skipCounts) safe(v *nodeView) bool {
	return v.C != nil && !(v.stale && sc.staleRejects) && v.foreign == "" && v.C.Healthy&^v.C.AnyNear[sc.li] == 0
}

// replace moves a node's count from its old view to its new one (either
// may be nil: no view). The caller holds the cache's mu.
func (sc *skipCounts) replace(old, new *nodeView) {
	if sc.li < 0 {
		return
	}
	if old != nil && !sc.safe(old) {
		sc.unsafe.Add(-1)
	}
	if new != nil && !sc.safe(new) {
		sc.unsafe.Add(1)
	}
}

// nodesChanged moves the epoch: the set of nodes with views, or a Node's
// GPU count, changed.
func (c *Cache) nodesChanged() { c.skip.epoch.Add(1) }

// markRaced remembers that pod's skipped cycle failed Reserve's check.
func (c *Cache) markRaced(pod types.UID) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.skip.raced[pod]; !ok {
		c.skip.raced[pod] = struct{}{}
		c.skip.racedN.Add(1)
	}
}

// forgetRaced drops pod from the raced set. The caller holds mu.
func (c *Cache) forgetRaced(pod types.UID) {
	if _, ok := c.skip.raced[pod]; ok {
		delete(c.skip.raced, pod)
		c.skip.racedN.Add(-1)
	}
}

// mayNotSkip: pod failed Reserve's check before, or too many pods did.
func (c *Cache) mayNotSkip(pod types.UID) bool {
	n := c.skip.racedN.Load()
	if n == 0 {
		return false
	}
	if n >= maxRaced {
		return true
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	_, ok := c.skip.raced[pod]
	return ok
}

// skipMemo is what the plugin checked of one snapshot node list.
type skipMemo struct {
	// nodes is the list checked; holding it keeps its array alive, so a
	// later list at the same address is the same list.
	nodes []fwk.NodeInfo
	epoch uint64
	// covered: every node of nodes with GPUs had a view.
	covered bool
}

// sameList reports whether a and b are the same list (same array and
// length), not merely equal contents.
func sameList(a, b []fwk.NodeInfo) bool {
	return len(a) == len(b) && (len(a) == 0 || &a[0] == &b[0])
}

// canSkipFilter reports whether Filter would pass every node of nodes that
// NodeResourcesFit passes, for the request in st (see the top of this
// file). Called from PreFilter, one cycle at a time.
func (pl *NICAffinity) canSkipFilter(cycle fwk.CycleState, pod types.UID, st *preFilterState, nodes []fwk.NodeInfo) bool {
	req := &st.req
	c := pl.cache
	if cycle.IsPodGroupSchedulingCycle() {
		return false // Reserve plans through the cycle's overlays
	}
	if !req.RDMA || !req.Required {
		return true // Filter passes every node: only scored
	}
	if !req.Common || c.skip.li < 0 ||
		c.skip.unsafe.Load() != 0 || c.mayNotSkip(pod) {
		return false
	}
	return pl.args.MissingTopology == MissingIgnore || pl.covered(nodes)
}

// covered reports whether every node of nodes that has GPUs has a view,
// from the memo when neither the list nor the epoch changed since.
func (pl *NICAffinity) covered(nodes []fwk.NodeInfo) bool {
	epoch := pl.cache.skip.epoch.Load()
	if m := pl.skipMemo.Load(); m != nil && m.epoch == epoch && sameList(m.nodes, nodes) {
		return m.covered
	}
	// The epoch is read before the pass: a change during it leaves a memo
	// that the next cycle does not trust.
	m := &skipMemo{nodes: nodes, epoch: epoch, covered: true}
	gpu := v1.ResourceName(pl.args.GPUResourceName)
	for _, n := range nodes {
		if hasGPUs(n, gpu) && pl.cache.cells.load(n.Node().Name) == nil {
			m.covered = false
			break
		}
	}
	pl.skipMemo.Store(m)
	return m.covered
}

// hasGPUs: the scheduler's books give the node GPUs (the allocatable
// NodeResourcesFit and takesLargestNode read).
func hasGPUs(n fwk.NodeInfo, gpu v1.ResourceName) bool {
	return n.GetAllocatable().GetScalarResources()[gpu] > 0
}

// skippedFilterHolds is Reserve's check of the chosen node in a cycle
// whose Filter PreFilter skipped: Filter's own verdict. A node that fails
// it marks the pod so its next cycles filter node by node.
func (pl *NICAffinity) skippedFilterHolds(st *preFilterState, pod types.UID, node string) *fwk.Status {
	if !st.filterSkipped {
		return nil
	}
	if s := pl.filterNode(st, node); !s.IsSuccess() {
		pl.cache.markRaced(pod)
		return fwk.NewStatus(fwk.Unschedulable, "checked at Reserve, after Filter was skipped: "+s.Message())
	}
	return nil
}
