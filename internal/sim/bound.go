package sim

import (
	"cmp"
	"math"
	"slices"
	"sort"
	"time"
)

// Bound is an upper bound on the GPUDirect-eligible RDMA jobs of a plan's
// workload on its cluster that no schedule can exceed, delays allowed: a
// job may wait for aligned GPUs (that is how the required policy buys
// alignment), but only until it is given up (maxWait).
type Bound struct {
	RDMAJobs int `json:"rdmaJobs"`
	// Alignable jobs fit, alone, on aligned GPUs: every pod on some node's
	// GPUs at PIX/PXB to a NIC (for a pod with one VF: GPUs near one NIC
	// that has VFs), the pods of a job on distinct GPUs. The rest can never
	// be eligible.
	Alignable int `json:"alignable"`
	// Jobs is the bound: Alignable less the jobs that cannot all be
	// eligible for lack of aligned GPU-time (below). Share = Jobs/RDMAJobs.
	Jobs  int     `json:"jobs"`
	Share float64 `json:"share"`
	// NoWait is the former relaxation, each job fixed at its arrival: it
	// holds only for schedules that never delay a job, so it is reported,
	// never checked; -1 when not computed (more than maxNoWaitJobs
	// alignable jobs).
	NoWait int `json:"noWait"`
}

// sizeLCM makes 1/k exact for every job size 1..8 in integer flow costs.
const sizeLCM = 840

// maxWindowJobs caps the capacity argument's work (windows are pairs of
// jobs): past it the bound is the alignable count alone.
const maxWindowJobs = 400

// maxNoWaitJobs caps the no-wait relaxation's min-cost flow, whose
// successive shortest paths cost O(jobs^2) each: a 20,000-job trace took
// 35 s and 100,000 over 17 minutes before it (round-4 audit). Past it
// NoWait is not computed (-1); it is reported only, never checked, so a
// 50,000-job trace replays with its bound at the cost of reading it.
const maxNoWaitJobs = 2000

// delayBound is the bound with delays. An eligible job runs its aligned
// runtime on aligned GPUs, starting no earlier than its arrival and no later
// than its arrival plus maxWait; so it runs inside its window [arrival,
// arrival + maxWait + duration]. For any interval [a, b], the eligible jobs
// whose windows lie inside it need at most capacity x (b - a) aligned
// GPU-seconds together, so at most k of them can be eligible, k the most
// of their smallest GPU-second footprints that fit. Intervals that do not
// overlap constrain disjoint sets of jobs, so the losses of a set of
// disjoint intervals add up; the largest total is a weighted interval
// scheduling problem, solved exactly. Every real schedule meets every one
// of these constraints, so none can beat Alignable less that total.
func delayBound(jobs []job, nodes []nodeInfo, maxWait time.Duration) Bound {
	b := Bound{}
	capacity := 0
	for _, n := range nodes {
		capacity += n.alignedCount()
	}
	var alignable []job
	room := newAlignedRoom(nodes)
	for _, j := range jobs {
		if !j.RDMA {
			continue
		}
		b.RDMAJobs++
		if room.fits(j) {
			alignable = append(alignable, j)
		}
	}
	b.Alignable = len(alignable)
	b.Jobs = b.Alignable - windowLosses(alignable, capacity, maxWait)
	if b.RDMAJobs > 0 {
		b.Share = round2(float64(b.Jobs) / float64(b.RDMAJobs))
	}
	b.NoWait = -1
	if len(alignable) <= maxNoWaitJobs {
		b.NoWait = noWaitBound(alignable, capacity)
	}
	return b
}

// alignedRoom is, per pod size, how many pods of that size an empty
// cluster holds on aligned GPUs (pods, and pods with one VF), computed
// once per plan so that reading a trace costs O(jobs + nodes), not their
// product.
type alignedRoom struct {
	pods, vfPods [maxPodGPUs + 1]int
}

// maxPodGPUs is the largest pod the simulator places (a whole node).
const maxPodGPUs = 8

func newAlignedRoom(nodes []nodeInfo) alignedRoom {
	var r alignedRoom
	for _, n := range nodes {
		a := n.alignedCount()
		for g := 1; g <= maxPodGPUs; g++ {
			r.pods[g] += a / g
			// One VF a pod: a pod uses one NIC's near GPUs.
			for _, vg := range n.VFGroups {
				if vg >= g {
					r.vfPods[g]++
				}
			}
		}
	}
	return r
}

// fits says whether a job's pods fit, all at once on an empty cluster, on
// aligned GPUs.
func (r alignedRoom) fits(j job) bool {
	if j.GPUs < 1 || j.GPUs > maxPodGPUs {
		return false
	}
	room := r.pods[j.GPUs]
	if j.VF {
		room = r.vfPods[j.GPUs]
	}
	return room >= max(1, j.Pods)
}

// windowLosses is the most jobs that disjoint intervals force out (see
// delayBound).
func windowLosses(jobs []job, capacity int, maxWait time.Duration) int {
	if len(jobs) == 0 || len(jobs) > maxWindowJobs {
		return 0
	}
	if capacity == 0 {
		return len(jobs)
	}
	type window struct {
		from, to time.Duration
		loss     int
	}
	starts, ends := map[time.Duration]bool{}, map[time.Duration]bool{}
	for _, j := range jobs {
		starts[j.At] = true
		ends[j.At+maxWait+j.Duration] = true
	}
	var windows []window
	for a := range starts {
		for e := range ends {
			if e <= a {
				continue
			}
			var need []float64 // GPU-seconds of the jobs inside [a, e]
			for _, j := range jobs {
				if j.At >= a && j.At+maxWait+j.Duration <= e {
					need = append(need, float64(j.totalGPUs())*j.Duration.Seconds())
				}
			}
			slices.Sort(need)
			room, fit := float64(capacity)*(e-a).Seconds(), 0
			for _, n := range need {
				if room < n {
					break
				}
				room -= n
				fit++
			}
			if loss := len(need) - fit; loss > 0 {
				windows = append(windows, window{a, e, loss})
			}
		}
	}
	if len(windows) == 0 {
		return 0
	}
	// Weighted interval scheduling over windows sorted by end: best[i] is
	// the largest loss of disjoint windows among the first i.
	slices.SortFunc(windows, func(x, y window) int { return cmp.Compare(x.to, y.to) })
	best := make([]int, len(windows)+1)
	for i, w := range windows {
		// The last window ending before w starts (windows share no moment).
		k := sort.Search(i, func(m int) bool { return windows[m].to >= w.from })
		best[i+1] = max(best[i], best[k]+w.loss)
	}
	return best[len(windows)]
}

// noWaitBound relaxes the cluster to one pool of aligned GPUs and the jobs
// to their written timeline (each runs from its arrival for its duration):
// at no moment can eligible jobs hold more aligned GPUs than the cluster
// has. The largest number of eligible jobs under that constraint is a
// linear program over intervals whose matrix has consecutive ones, solved
// exactly as a min-cost flow along the time axis (jobs may take part of
// their GPUs, which only raises it; exact for jobs of up to 8 GPUs, whose
// weights sizeLCM divides). A schedule that delays a job is not bound by it.
func noWaitBound(alignable []job, capacity int) int {
	if len(alignable) == 0 || capacity == 0 {
		return 0
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
		g.addArc(from, to, j.totalGPUs(), -sizeLCM/j.totalGPUs())
	}
	cost := g.minCostFlow(0, len(times)-1, capacity)
	// The relaxation's optimum is -cost/sizeLCM jobs, fractional; an
	// integral count can be no more than its floor.
	return int(math.Floor(float64(-cost)/sizeLCM + 1e-9))
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
