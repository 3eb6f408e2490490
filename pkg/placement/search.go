package placement

import (
	"slices"

	"github.com/nicaffinity/nicaffinity/pkg/nrt"
	"github.com/nicaffinity/nicaffinity/pkg/topology"
)

// pxbIndex is PXB's level index: pods without RDMA keep the GPUs aligned
// at PXB or closer for the pods that need them.
var pxbIndex = LevelIndex(topology.LevelPXB)

// LevelIndex is l's index in topology.Levels (PIX 0 ... SYS 5).
func LevelIndex(l topology.Level) int {
	i, ok := nrt.LevelIndex(l)
	if !ok {
		return len(topology.Levels) - 1
	}
	return i
}

// maxMasks bounds the NIC coverage search (NICs with free VFs); Compile
// caps NIC zones at nrt.MaxNICs, which is the same.
const maxMasks = nrt.MaxNICs

// MaxCallSteps is the search budget of one Filter, Score or Reserve call:
// every coverage search the call makes (one per VF resource, and in Score
// and Reserve one per level tried) draws on the same budget, so the work a
// call does is bounded whatever the object and the pod ask. Real nodes
// need a few hundred steps at most (8 to 16 NICs, masks deduplicated); a
// hostile object with dozens of distinct masks and a pod asking for many
// VFs would need millions. Past the budget the node counts as not fitting
// (Filter) or as not reaching the remaining levels (Score). Its cost is in
// measurements/hostile-object.md.
const MaxCallSteps = 10_000

// Feasible reports whether some set of req.gpus free GPUs each has a usable
// NIC at level index li or closer, with free VFs where the pod asks for VFs.
// Searches draw on *steps, the call's budget.
func (v *Node) Feasible(req *Request, li int, steps *int) bool {
	if !req.RDMA {
		return v.Free.Count() >= req.GPUs
	}
	if len(req.VFs) == 0 {
		return (v.Free & v.C.AnyNear[li]).Count() >= req.GPUs
	}
	for i := range req.VFs {
		if !v.coverable(req.VFs[i], li, req.GPUs, steps) {
			return false
		}
	}
	return true
}

// coverable: the pod's VFs come from some PFs; every chosen GPU must be near
// one of them. Is there a set of at most vf.count PFs with free VFs whose
// near GPUs (among the free ones) number at least gpus? NICs with the same
// near GPUs are one choice, so they are searched once.
func (v *Node) coverable(vf VF, li, gpus int, steps *int) bool {
	var masks [maxMasks]nrt.GPUSet
	n := 0
	var total int64
	for nic, free := range v.VFFree[vf.Resource] {
		if free <= 0 {
			continue
		}
		total += free
		m := v.C.Near[li][nic] & v.Free
		if m == 0 || n == maxMasks || slices.Contains(masks[:n], m) {
			continue
		}
		masks[n] = m
		n++
	}
	if total < vf.Count {
		return false
	}
	return BestCover(masks[:n], int(min(vf.Count, int64(n))), 0, gpus, steps)
}

// BestCover searches unions of at most k masks (depth-first, masks in
// order) for one with at least want members, within *steps calls: each
// call spends one step, and none is made once the budget is spent, so
// *steps never goes below 0.
func BestCover(masks []nrt.GPUSet, k int, have nrt.GPUSet, want int, steps *int) bool {
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
		if BestCover(masks[i+1:], k-1, have|m, want, steps) {
			return true
		}
	}
	return false
}

// BestLevel is the closest level index at which the pod fits, or -1. All
// levels share the call's budget *steps.
func (v *Node) BestLevel(req *Request, steps *int) int {
	for li := range topology.Levels {
		if v.Feasible(req, li, steps) {
			return li
		}
	}
	return -1
}

// Plan picks the GPUs for a pod at level index li: closest GPUs first, then
// GPUs of switches already in use (to keep whole NIC-bearing switches for
// later pods), then index order. Pods without RDMA take GPUs without a
// GPUDirect-capable NIC first. It does not allocate.
func (v *Node) Plan(req *Request, li int) nrt.GPUSet {
	p, gpus := v.Planner(req, li)
	for picked := gpus.Count(); picked < req.GPUs; picked++ {
		g := p.Next(gpus)
		if g < 0 {
			break
		}
		gpus |= 1 << g
	}
	return gpus
}

// Planner is plan's greedy choice for one request at one level: which GPU
// to add next to those picked so far. The choice does not depend on how
// many GPUs the pod asks for, so the plan of g GPUs is always the first g
// picks (outside the rails' first picks, which planner makes up front):
// precompute plans every size of a common request from one sequence.
type Planner struct {
	v   *Node
	req *Request
	// candidates are the GPUs the plan may take; keep those a pod that
	// must have a VF could use.
	candidates, keep nrt.GPUSet
}

// Planner sets up plan's choice for req at level index li, and returns
// the GPUs picked before the greedy part (one on each of the job's rails).
func (v *Node) Planner(req *Request, li int) (p Planner, gpus nrt.GPUSet) {
	c := v.C
	p = Planner{v: v, req: req, candidates: v.Free}
	if req.RDMA {
		p.candidates &= c.AnyNear[li]
		if len(req.JobRails) > 0 {
			on := v.railNear(li, req.JobRails) & p.candidates
			if on.Count() >= req.GPUs {
				p.candidates = on // all on the job's rails when that is enough
			}
			if req.GPUs >= len(req.JobRails) {
				gpus = v.coverRails(req.JobRails, li, p.candidates) // one on each of them first
			}
		}
		if len(req.VFs) > 0 {
			var near nrt.GPUSet
			for n, free := range v.VFFree[req.VFs[0].Resource] {
				if free > 0 {
					near |= c.Near[li][n]
				}
			}
			p.candidates &= near
		}
	}
	if req.RDMA && len(req.VFs) == 0 {
		p.keep = v.VFKeepers(li)
	}
	return p, gpus
}

// Next is the GPU to add to gpus, or -1 when no candidate is left.
func (p *Planner) Next(gpus nrt.GPUSet) int {
	v, c, req := p.v, p.v.C, p.req
	best, bestKey := -1, [5]int{}
	for g := range c.GPUs {
		if p.candidates&(1<<g) == 0 || gpus&(1<<g) != 0 {
			continue
		}
		sw := c.SwitchOf[g]
		whole := 0
		if c.Switches[sw]&^v.Free == 0 && gpus&c.Switches[sw] == 0 {
			whole = 1 // taking it breaks a whole switch
		}
		room := 0
		if req.RailRoom != nil {
			room = -req.RailRoom[v.railOf(g)]
		}
		vf := 0
		if p.keep&(1<<g) != 0 {
			vf = 1 // a pod that must have a VF could use it
		}
		key := [5]int{int(c.BestLevel[g]), room, vf, whole, g}
		if !req.RDMA {
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

// VFKeepers are the GPUs at level index li or closer to a NIC with free
// VFs. An RDMA pod that asks for no VFs leaves them, where it can, to
// pods that must have a VF next to their GPUs: on a board with VFs on
// some NICs only, those are the only GPUs such pods can take.
func (v *Node) VFKeepers(li int) nrt.GPUSet {
	var m nrt.GPUSet
	for _, free := range v.VFFree {
		for n, k := range free {
			if k > 0 {
				m |= v.C.Near[li][n]
			}
		}
	}
	return m
}

// railNear are the free GPUs at level index li or closer to a NIC on one
// of rails.
func (v *Node) railNear(li int, rails []string) nrt.GPUSet {
	var m nrt.GPUSet
	for n, nic := range v.C.NICs {
		if nic.Rail != "" && slices.Contains(rails, nic.Rail) {
			m |= v.C.Near[li][n]
		}
	}
	return m & v.Free
}

// RailsFit reports whether the pod can take req.gpus free GPUs at level
// index li or closer on its job's rails: a pod of fewer GPUs than the job
// has rails uses some of them, one of as many uses exactly them, and a
// larger one reaches every one of them (adding rails only because it
// must). A job with no rails yet fits anywhere; a node that publishes no
// rails fits no job that has some.
func (v *Node) RailsFit(req *Request, li int) bool {
	if len(req.JobRails) == 0 {
		return true
	}
	on := v.railNear(li, req.JobRails)
	switch {
	case req.GPUs < len(req.JobRails):
		return on.Count() >= req.GPUs
	case req.GPUs == len(req.JobRails):
		return on.Count() >= req.GPUs && v.coverRails(req.JobRails, li, on) != 0
	}
	aligned := v.Free & v.C.AnyNear[li]
	return aligned.Count() >= req.GPUs && v.coverRails(req.JobRails, li, aligned) != 0
}

// coverRails picks, among candidates, one GPU next to a NIC on each of
// rails (lowest index first), or none when some rail has no such GPU left.
func (v *Node) coverRails(rails []string, li int, candidates nrt.GPUSet) nrt.GPUSet {
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

// NICsFor lists, for planned GPUs, the NIC each should use, nearest first.
func (v *Node) NICsFor(req *Request, gpus nrt.GPUSet) []int {
	var nics []int
	if !req.RDMA {
		return nil
	}
	for g := range v.C.GPUs {
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
func (v *Node) nearestNIC(req *Request, g int) int {
	best, bestKey := -1, [3]int{}
	for n := range v.C.NICs {
		if len(req.VFs) > 0 && v.VFFree[req.VFs[0].Resource][n] <= 0 {
			continue
		}
		level := v.C.GPUs[g].Level[n]
		key := [3]int{0, 0, int(level)}
		switch {
		case len(req.JobRails) == 0:
		case level > req.MaxLevel:
			key[0] = 1
		case !slices.Contains(req.JobRails, v.C.NICs[n].Rail):
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
func (v *Node) railOf(g int) string {
	best := -1
	for n := range v.C.NICs {
		if best < 0 || v.C.GPUs[g].Level[n] < v.C.GPUs[g].Level[best] {
			best = n
		}
	}
	if best < 0 {
		return ""
	}
	return v.C.NICs[best].Rail
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

// Certainty is how likely (0..1) the device plugin, picking req.gpus of the
// free GPUs without regard to NICs, hands out only GPUs with a NIC at level
// index li or closer: C(aligned, g) / C(free, g).
func (v *Node) Certainty(req *Request, li int) float64 {
	free := v.Free.Count()
	aligned := (v.Free & v.C.AnyNear[li]).Count()
	if free == 0 || aligned < req.GPUs {
		return 0
	}
	p := 1.0
	for i := 0; i < req.GPUs; i++ {
		p *= float64(aligned-i) / float64(free-i)
	}
	return p
}

// Packing (0..1) rewards placements that keep NIC-bearing switches whole:
// for RDMA pods, the share of planned GPUs taken from switches already in
// use (for pods without VFs, not counting GPUs next to free VFs); for pods
// without RDMA, the share taken from GPUs without a GPUDirect-capable NIC.
func (v *Node) Packing(req *Request, planned nrt.GPUSet) float64 {
	if req.GPUs == 0 || planned == 0 {
		return 0
	}
	pk := v.Packer(req)
	good := 0
	for g := range v.C.GPUs {
		if planned&(1<<g) != 0 && pk.Good(g) {
			good++
		}
	}
	return Packed(good, planned.Count())
}

// Packed is packing's share: good of n planned GPUs.
func Packed(good, n int) float64 { return float64(good) / float64(n) }

// Packer tells which planned GPUs count as good packing for one request;
// whether a GPU does depends on the view, not on the other GPUs planned.
type Packer struct {
	v    *Node
	rdma bool
	// keep are the GPUs next to free VFs, for RDMA pods without VFs.
	keep nrt.GPUSet
}

func (v *Node) Packer(req *Request) Packer {
	pk := Packer{v: v, rdma: req.RDMA}
	if req.RDMA && len(req.VFs) == 0 {
		pk.keep = v.VFKeepers(LevelIndex(req.MaxLevel))
	}
	return pk
}

// good: planning GPU g is good packing.
func (pk Packer) Good(g int) bool {
	c := pk.v.C
	if pk.rdma {
		// Taking a GPU that a VF pod could use is no good packing,
		// even on a broken switch.
		return pk.keep&(1<<g) == 0 && c.Switches[c.SwitchOf[g]]&^pk.v.Free != 0 // the switch was already broken
	}
	return c.AnyNear[pxbIndex]&(1<<g) == 0
}
