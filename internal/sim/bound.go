package sim

import (
	"math"
	"slices"
	"time"
)

// Bound is the offline bound on the GPUDirect-eligible share: the most RDMA
// jobs that any placement could give every GPU a PIX/PXB NIC, knowing the
// whole workload in advance.
type Bound struct {
	RDMAJobs int `json:"rdmaJobs"`
	// Alignable jobs fit, alone, on some node's aligned GPUs (for a job
	// with one VF: GPUs near one NIC that has VFs); the rest can never be
	// eligible.
	Alignable int `json:"alignable"`
	// Jobs is at most how many can be eligible together; Share = Jobs/RDMAJobs.
	Jobs  int     `json:"jobs"`
	Share float64 `json:"share"`
}

// sizeLCM makes 1/k exact for every job size 1..8 in integer flow costs.
const sizeLCM = 840

// offlineBound relaxes the cluster to one pool of aligned GPUs and the jobs
// to their written timeline (each runs from its submission for its
// duration): a job can be eligible only if some node alone has enough
// aligned GPUs for it, and at no moment can eligible jobs hold more aligned
// GPUs than the cluster has. The largest number of eligible jobs under those
// constraints is a linear program over intervals whose matrix has
// consecutive ones, solved exactly as a min-cost flow along the time axis
// (jobs may take part of their GPUs in the relaxation, which only raises
// it). Every real placement also meets both constraints, so no scheduler
// can beat the result; how close the real runs come is the report's point.
func offlineBound(jobs []job, nodes []nodeInfo) Bound {
	var b Bound
	capacity := 0
	for _, n := range nodes {
		capacity += n.alignedCount()
	}
	var alignable []job
	for _, j := range jobs {
		if !j.RDMA {
			continue
		}
		b.RDMAJobs++
		for _, n := range nodes {
			if (!j.VF && n.alignedCount() >= j.GPUs) || (j.VF && n.VFGroup >= j.GPUs) {
				alignable = append(alignable, j)
				break
			}
		}
	}
	b.Alignable = len(alignable)
	if len(alignable) == 0 || capacity == 0 {
		return b
	}
	var times []time.Duration
	for _, j := range alignable {
		times = append(times, j.At, j.At+j.Duration)
	}
	slices.Sort(times)
	times = slices.Compact(times)
	g := newFlowGraph(len(times))
	for i := 0; i+1 < len(times); i++ {
		g.addArc(i, i+1, capacity, 0)
	}
	for _, j := range alignable {
		from, _ := slices.BinarySearch(times, j.At)
		to, _ := slices.BinarySearch(times, j.At+j.Duration)
		g.addArc(from, to, j.GPUs, -sizeLCM/j.GPUs)
	}
	cost := g.minCostFlow(0, len(times)-1, capacity)
	// The relaxation's optimum is -cost/sizeLCM jobs, fractional; an
	// integral count can be no more than its floor.
	b.Jobs = int(math.Floor(float64(-cost)/sizeLCM + 1e-9))
	if b.RDMAJobs > 0 {
		b.Share = round2(float64(b.Jobs) / float64(b.RDMAJobs))
	}
	return b
}

type flowArc struct {
	to, cap, cost, rev int
}

type flowGraph struct {
	arcs [][]flowArc
}

func newFlowGraph(n int) *flowGraph { return &flowGraph{arcs: make([][]flowArc, n)} }

func (g *flowGraph) addArc(from, to, capacity, cost int) {
	g.arcs[from] = append(g.arcs[from], flowArc{to: to, cap: capacity, cost: cost, rev: len(g.arcs[to])})
	g.arcs[to] = append(g.arcs[to], flowArc{to: from, cap: 0, cost: -cost, rev: len(g.arcs[from]) - 1})
}

// minCostFlow sends want units from s to t along successive shortest paths
// (Bellman-Ford: costs are negative, and the residual graph never has a
// negative cycle when each augmentation follows a shortest path) and
// returns the total cost.
func (g *flowGraph) minCostFlow(s, t, want int) int {
	total := 0
	n := len(g.arcs)
	for want > 0 {
		dist := make([]int, n)
		prevNode, prevArc := make([]int, n), make([]int, n)
		for i := range dist {
			dist[i] = math.MaxInt
		}
		dist[s] = 0
		for round := 0; round < n; round++ {
			changed := false
			for u := 0; u < n; u++ {
				if dist[u] == math.MaxInt {
					continue
				}
				for i, a := range g.arcs[u] {
					if a.cap > 0 && dist[u]+a.cost < dist[a.to] {
						dist[a.to], prevNode[a.to], prevArc[a.to] = dist[u]+a.cost, u, i
						changed = true
					}
				}
			}
			if !changed {
				break
			}
		}
		if dist[t] == math.MaxInt {
			return total
		}
		push := want
		for v := t; v != s; v = prevNode[v] {
			push = min(push, g.arcs[prevNode[v]][prevArc[v]].cap)
		}
		for v := t; v != s; v = prevNode[v] {
			a := &g.arcs[prevNode[v]][prevArc[v]]
			a.cap -= push
			g.arcs[v][a.rev].cap += push
		}
		total += push * dist[t]
		want -= push
	}
	return total
}
