package nicaffinity

import (
	"slices"

	"github.com/nicaffinity/nicaffinity/pkg/nrt"
	"github.com/nicaffinity/nicaffinity/pkg/topology"
)

// request is what a pod asks for, computed once in PreFilter.
type request struct {
	gpus     int
	rdma     bool
	vfs      []vfRequest
	maxLevel topology.Level
	required bool
	// nccl is the pod's NCCL environment that set maxLevel, for messages.
	nccl string
	// job is the pod's job (namespace/name), "" for a job of one.
	job string
	// rails is how the pod holds to its job's rails (annotations'
	// PolicyRequired, PolicyPreferred, PolicyIgnore); followRails is
	// whether it does at all (a job's RDMA pod that does not ignore them).
	rails       string
	followRails bool
	// jobRails are the rails the job's other pods hold, as the store had
	// them at PreFilter (in a pod-group cycle, the members reserved before
	// this one); nil when none or not followed.
	jobRails []string
	// railRoom is, for a job's first pod (jobRails empty), the free GPUs
	// next to each rail's NICs over the cluster, which Reserve's plan
	// prefers the largest of, so that the job's next pods find room on
	// the rails its first one takes; nil otherwise.
	railRoom map[string]int
	// common: the plugin's default level and policy, no VFs. Views carry
	// precomputed answers for such requests (see answers).
	common bool
}

type vfRequest struct {
	resource string
	count    int64
}

// nodeView is what Filter and Score read of one node: the compiled object
// and what this scheduler reserved that the object does not show yet. Views
// are immutable; the cache swaps in a new one on every change.
type nodeView struct {
	// c is nil when the node's object cannot be used; why says why,
	// following "NodeResourceTopology " ("cannot be read: ...", "is
	// stale: ...").
	c   *nrt.Compiled
	why string
	// state is the node's topology_nodes state (stateUsable, ...; ""
	// without an object): what metrics read, where why is for people.
	state string
	// free are the GPUs free after reservations.
	free nrt.GPUSet
	// vfFree[resource][n] are NIC n's free VFs after reservations.
	vfFree map[string][]int64
	// stale is set while the object does not count every pod placed here.
	stale bool
	// answers[g] are Filter's and Score's answers for a common request of
	// g GPUs (0 < g < answered), computed once when the view is built: most
	// pods ask the same few things of a node that changes far less often
	// than it is asked. answered is 0 until the plugin sets them up.
	answers  [maxAnswered]answer
	answered int
}

// maxAnswered bounds the precomputed answers: requests of 1 to
// maxAnswered-1 GPUs (nodes of up to 16 GPUs get an answer for every size
// they can take partly); larger requests search.
const maxAnswered = 16

// commonAnswer is the view's precomputed answer for req, if it has one.
func (v *nodeView) commonAnswer(req *request) (answer, bool) {
	if !req.common || req.gpus >= v.answered {
		return answer{}, false
	}
	return v.answers[req.gpus], true
}

// answer is what a common request of some number of GPUs gets from one
// view: with RDMA, whether it fits and its score; without, its score.
type answer struct {
	feasible bool
	// Scores are 0..MaxNodeScore (100).
	score, plain uint8
}

// pxbIndex is PXB's level index: pods without RDMA keep the GPUs aligned
// at PXB or closer for the pods that need them.
var pxbIndex = levelIndex(topology.LevelPXB)

// levelIndex is l's index in topology.Levels (PIX 0 ... SYS 5).
func levelIndex(l topology.Level) int {
	i, ok := nrt.LevelIndex(l)
	if !ok {
		return len(topology.Levels) - 1
	}
	return i
}

// maxMasks bounds the NIC coverage search (NICs with free VFs); Compile
// caps NIC zones at nrt.MaxNICs, which is the same.
const maxMasks = nrt.MaxNICs

// maxCallSteps is the search budget of one Filter, Score or Reserve call:
// every coverage search the call makes (one per VF resource, and in Score
// and Reserve one per level tried) draws on the same budget, so the work a
// call does is bounded whatever the object and the pod ask. Real nodes
// need a few hundred steps at most (8 to 16 NICs, masks deduplicated); a
// hostile object with dozens of distinct masks and a pod asking for many
// VFs would need millions. Past the budget the node counts as not fitting
// (Filter) or as not reaching the remaining levels (Score). Its cost is in
// docs/bench/hostile-object.md.
const maxCallSteps = 10_000

// feasible reports whether some set of req.gpus free GPUs each has a usable
// NIC at level index li or closer, with free VFs where the pod asks for VFs.
// Searches draw on *steps, the call's budget.
func (v *nodeView) feasible(req *request, li int, steps *int) bool {
	if !req.rdma {
		return v.free.Count() >= req.gpus
	}
	if len(req.vfs) == 0 {
		return (v.free & v.c.AnyNear[li]).Count() >= req.gpus
	}
	for i := range req.vfs {
		if !v.coverable(req.vfs[i], li, req.gpus, steps) {
			return false
		}
	}
	return true
}

// coverable: the pod's VFs come from some PFs; every chosen GPU must be near
// one of them. Is there a set of at most vf.count PFs with free VFs whose
// near GPUs (among the free ones) number at least gpus? NICs with the same
// near GPUs are one choice, so they are searched once.
func (v *nodeView) coverable(vf vfRequest, li, gpus int, steps *int) bool {
	var masks [maxMasks]nrt.GPUSet
	n := 0
	var total int64
	for nic, free := range v.vfFree[vf.resource] {
		if free <= 0 {
			continue
		}
		total += free
		m := v.c.Near[li][nic] & v.free
		if m == 0 || n == maxMasks || slices.Contains(masks[:n], m) {
			continue
		}
		masks[n] = m
		n++
	}
	if total < vf.count {
		return false
	}
	return bestCover(masks[:n], int(min(vf.count, int64(n))), 0, gpus, steps)
}

// bestCover searches unions of at most k masks (depth-first, masks in
// order) for one with at least want members, within *steps calls: each
// call spends one step, and none is made once the budget is spent, so
// *steps never goes below 0.
func bestCover(masks []nrt.GPUSet, k int, have nrt.GPUSet, want int, steps *int) bool {
	if *steps <= 0 {
		return false
	}
	*steps--
	if have.Count() >= want {
		return true
	}
	if k == 0 {
		return false
	}
	var all nrt.GPUSet
	for _, m := range masks {
		all |= m
	}
	if (have | all).Count() < want {
		return false // even every mask would not do
	}
	for i, m := range masks {
		if m&^have == 0 {
			continue
		}
		if bestCover(masks[i+1:], k-1, have|m, want, steps) {
			return true
		}
	}
	return false
}

// bestLevel is the closest level index at which the pod fits, or -1. All
// levels share the call's budget *steps.
func (v *nodeView) bestLevel(req *request, steps *int) int {
	for li := range topology.Levels {
		if v.feasible(req, li, steps) {
			return li
		}
	}
	return -1
}

// plan picks the GPUs for a pod at level index li: closest GPUs first, then
// GPUs of switches already in use (to keep whole NIC-bearing switches for
// later pods), then index order. Pods without RDMA take GPUs without a
// GPUDirect-capable NIC first. It does not allocate.
func (v *nodeView) plan(req *request, li int) nrt.GPUSet {
	p, gpus := v.planner(req, li)
	for picked := gpus.Count(); picked < req.gpus; picked++ {
		g := p.next(gpus)
		if g < 0 {
			break
		}
		gpus |= 1 << g
	}
	return gpus
}

// planner is plan's greedy choice for one request at one level: which GPU
// to add next to those picked so far. The choice does not depend on how
// many GPUs the pod asks for, so the plan of g GPUs is always the first g
// picks (outside the rails' first picks, which planner makes up front):
// precompute plans every size of a common request from one sequence.
type planner struct {
	v   *nodeView
	req *request
	// candidates are the GPUs the plan may take; keep those a pod that
	// must have a VF could use.
	candidates, keep nrt.GPUSet
}

// planner sets up plan's choice for req at level index li, and returns
// the GPUs picked before the greedy part (one on each of the job's rails).
func (v *nodeView) planner(req *request, li int) (p planner, gpus nrt.GPUSet) {
	c := v.c
	p = planner{v: v, req: req, candidates: v.free}
	if req.rdma {
		p.candidates &= c.AnyNear[li]
		if len(req.jobRails) > 0 {
			on := v.railNear(li, req.jobRails) & p.candidates
			if on.Count() >= req.gpus {
				p.candidates = on // all on the job's rails when that is enough
			}
			if req.gpus >= len(req.jobRails) {
				gpus = v.coverRails(req.jobRails, li, p.candidates) // one on each of them first
			}
		}
		if len(req.vfs) > 0 {
			var near nrt.GPUSet
			for n, free := range v.vfFree[req.vfs[0].resource] {
				if free > 0 {
					near |= c.Near[li][n]
				}
			}
			p.candidates &= near
		}
	}
	if req.rdma && len(req.vfs) == 0 {
		p.keep = v.vfKeepers(li)
	}
	return p, gpus
}

// next is the GPU to add to gpus, or -1 when no candidate is left.
func (p *planner) next(gpus nrt.GPUSet) int {
	v, c, req := p.v, p.v.c, p.req
	best, bestKey := -1, [5]int{}
	for g := range c.GPUs {
		if p.candidates&(1<<g) == 0 || gpus&(1<<g) != 0 {
			continue
		}
		sw := c.SwitchOf[g]
		whole := 0
		if c.Switches[sw]&^v.free == 0 && gpus&c.Switches[sw] == 0 {
			whole = 1 // taking it breaks a whole switch
		}
		room := 0
		if req.railRoom != nil {
			room = -req.railRoom[v.railOf(g)]
		}
		vf := 0
		if p.keep&(1<<g) != 0 {
			vf = 1 // a pod that must have a VF could use it
		}
		key := [5]int{int(c.BestLevel[g]), room, vf, whole, g}
		if !req.rdma {
			aligned := 0
			if c.AnyNear[pxbIndex]&(1<<g) != 0 {
				aligned = 1
			}
			key = [5]int{aligned, 0, 0, whole, g}
		}
		if best < 0 || less(key[:], bestKey[:]) {
			best, bestKey = g, key
		}
	}
	return best
}

// vfKeepers are the GPUs at level index li or closer to a NIC with free
// VFs. An RDMA pod that asks for no VFs leaves them, where it can, to
// pods that must have a VF next to their GPUs: on a board with VFs on
// some NICs only, those are the only GPUs such pods can take.
func (v *nodeView) vfKeepers(li int) nrt.GPUSet {
	var m nrt.GPUSet
	for _, free := range v.vfFree {
		for n, k := range free {
			if k > 0 {
				m |= v.c.Near[li][n]
			}
		}
	}
	return m
}

// railNear are the free GPUs at level index li or closer to a NIC on one
// of rails.
func (v *nodeView) railNear(li int, rails []string) nrt.GPUSet {
	var m nrt.GPUSet
	for n, nic := range v.c.NICs {
		if nic.Rail != "" && slices.Contains(rails, nic.Rail) {
			m |= v.c.Near[li][n]
		}
	}
	return m & v.free
}

// railsFit reports whether the pod can take req.gpus free GPUs at level
// index li or closer on its job's rails: a pod of fewer GPUs than the job
// has rails uses some of them, one of as many uses exactly them, and a
// larger one reaches every one of them (adding rails only because it
// must). A job with no rails yet fits anywhere; a node that publishes no
// rails fits no job that has some.
func (v *nodeView) railsFit(req *request, li int) bool {
	if len(req.jobRails) == 0 {
		return true
	}
	on := v.railNear(li, req.jobRails)
	switch {
	case req.gpus < len(req.jobRails):
		return on.Count() >= req.gpus
	case req.gpus == len(req.jobRails):
		return on.Count() >= req.gpus && v.coverRails(req.jobRails, li, on) != 0
	}
	aligned := v.free & v.c.AnyNear[li]
	return aligned.Count() >= req.gpus && v.coverRails(req.jobRails, li, aligned) != 0
}

// coverRails picks, among candidates, one GPU next to a NIC on each of
// rails (lowest index first), or none when some rail has no such GPU left.
func (v *nodeView) coverRails(rails []string, li int, candidates nrt.GPUSet) nrt.GPUSet {
	var used nrt.GPUSet
	for _, r := range rails {
		m := v.railNear(li, []string{r}) & candidates &^ used
		if m == 0 {
			return 0
		}
		used |= m & -m
	}
	return used
}

// nicsFor lists, for planned GPUs, the NIC each should use, nearest first.
func (v *nodeView) nicsFor(req *request, gpus nrt.GPUSet) []int {
	var nics []int
	if !req.rdma {
		return nil
	}
	for g := range v.c.GPUs {
		if gpus&(1<<g) == 0 {
			continue
		}
		if n := v.nearestNIC(req, g); n >= 0 && !contains(nics, n) {
			nics = append(nics, n)
		}
	}
	return nics
}

// nearestNIC is the NIC GPU g should use: the nearest, except that among
// NICs within the pod's level one on its job's rails goes first.
func (v *nodeView) nearestNIC(req *request, g int) int {
	best, bestKey := -1, [3]int{}
	for n := range v.c.NICs {
		if len(req.vfs) > 0 && v.vfFree[req.vfs[0].resource][n] <= 0 {
			continue
		}
		level := v.c.GPUs[g].Level[n]
		key := [3]int{0, 0, int(level)}
		switch {
		case len(req.jobRails) == 0:
		case level > req.maxLevel:
			key[0] = 1
		case !slices.Contains(req.jobRails, v.c.NICs[n].Rail):
			key[1] = 1
		}
		if best < 0 || less(key[:], bestKey[:]) {
			best, bestKey = n, key
		}
	}
	return best
}

// railOf is the rail of GPU g's nearest NIC (the first among equals), ""
// when that NIC has none.
func (v *nodeView) railOf(g int) string {
	best := -1
	for n := range v.c.NICs {
		if best < 0 || v.c.GPUs[g].Level[n] < v.c.GPUs[g].Level[best] {
			best = n
		}
	}
	if best < 0 {
		return ""
	}
	return v.c.NICs[best].Rail
}

func less(a, b []int) bool {
	for i := range a {
		if a[i] != b[i] {
			return a[i] < b[i]
		}
	}
	return false
}

func contains(xs []int, x int) bool {
	for _, v := range xs {
		if v == x {
			return true
		}
	}
	return false
}

// certainty is how likely (0..1) the device plugin, picking req.gpus of the
// free GPUs without regard to NICs, hands out only GPUs with a NIC at level
// index li or closer: C(aligned, g) / C(free, g).
func (v *nodeView) certainty(req *request, li int) float64 {
	free := v.free.Count()
	aligned := (v.free & v.c.AnyNear[li]).Count()
	if free == 0 || aligned < req.gpus {
		return 0
	}
	p := 1.0
	for i := 0; i < req.gpus; i++ {
		p *= float64(aligned-i) / float64(free-i)
	}
	return p
}

// packing (0..1) rewards placements that keep NIC-bearing switches whole:
// for RDMA pods, the share of planned GPUs taken from switches already in
// use (for pods without VFs, not counting GPUs next to free VFs); for pods
// without RDMA, the share taken from GPUs without a GPUDirect-capable NIC.
func (v *nodeView) packing(req *request, planned nrt.GPUSet) float64 {
	if req.gpus == 0 || planned == 0 {
		return 0
	}
	pk := v.packer(req)
	good := 0
	for g := range v.c.GPUs {
		if planned&(1<<g) != 0 && pk.good(g) {
			good++
		}
	}
	return packed(good, planned.Count())
}

// packed is packing's share: good of n planned GPUs.
func packed(good, n int) float64 { return float64(good) / float64(n) }

// packer tells which planned GPUs count as good packing for one request;
// whether a GPU does depends on the view, not on the other GPUs planned.
type packer struct {
	v    *nodeView
	rdma bool
	// keep are the GPUs next to free VFs, for RDMA pods without VFs.
	keep nrt.GPUSet
}

func (v *nodeView) packer(req *request) packer {
	pk := packer{v: v, rdma: req.rdma}
	if req.rdma && len(req.vfs) == 0 {
		pk.keep = v.vfKeepers(levelIndex(req.maxLevel))
	}
	return pk
}

// good: planning GPU g is good packing.
func (pk packer) good(g int) bool {
	c := pk.v.c
	if pk.rdma {
		// Taking a GPU that a VF pod could use is no good packing,
		// even on a broken switch.
		return pk.keep&(1<<g) == 0 && c.Switches[c.SwitchOf[g]]&^pk.v.free != 0 // the switch was already broken
	}
	return c.AnyNear[pxbIndex]&(1<<g) == 0
}
