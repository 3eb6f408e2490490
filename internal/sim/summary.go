package sim

import (
	"fmt"
	"slices"
	"time"

	"github.com/nicaffinity/nicaffinity/pkg/topology"
)

// Report is a whole simulation: the specs, and per run (one workload seed)
// the bound and one result per column, then the figures over the
// runs and the verdict.
type Report struct {
	Cluster     ClusterSpec  `json:"cluster"`
	Workload    WorkloadSpec `json:"workload"`
	Nodes       int          `json:"nodes"`
	GPUs        int          `json:"gpus"`
	AlignedGPUs int          `json:"alignedGPUs"`
	Columns     []Column     `json:"columns"`
	Seeds       []int64      `json:"seeds"`
	Bounds      []Bound      `json:"bounds"`
	// Runs holds, per seed, one result per column in Columns order.
	Runs    [][]Result      `json:"runs"`
	Summary []ColumnSummary `json:"summary"`
	Verdict string          `json:"verdict"`
	// Replay is how long the replays took on the wall clock: about the
	// machine, never a figure of the workload (nil when not measured).
	Replay *ReplayStats `json:"replay,omitempty"`
}

// ReplayStats is a report's replays on the wall clock.
type ReplayStats struct {
	// API is what the replays ran on: "in-memory" or "kube-apiserver".
	API           string  `json:"api"`
	Seconds       float64 `json:"seconds"`
	Pods          int     `json:"pods"`
	PodsPerSecond float64 `json:"podsPerSecond"`
}

// NewReport starts a report of a cluster and the columns it compares.
func NewReport(p *Plan, cols []Column) *Report {
	return &Report{Cluster: p.Cluster, Workload: p.Workload, Nodes: len(p.info), GPUs: p.GPUs(), AlignedGPUs: p.AlignedGPUs(), Columns: cols}
}

// Add records one run: the plan (its seed and bound) and a result per
// column, in the report's column order. A column above its seed's bound is
// a harness bug (the bound holds for every schedule), and is refused.
func (rep *Report) Add(p *Plan, results []Result) error {
	for i := range results {
		results[i].Seed = p.Workload.Seed
		if results[i].GPUDirectJobs > p.bound.Jobs {
			return fmt.Errorf("harness bug: %s has %d GPUDirect-eligible jobs with seed %d, above the bound of %d that no schedule can pass (%+v)",
				results[i].Scheduler, results[i].GPUDirectJobs, p.Workload.Seed, p.bound.Jobs, p.bound)
		}
	}
	rep.Seeds = append(rep.Seeds, p.Workload.Seed)
	rep.Bounds = append(rep.Bounds, p.bound)
	rep.Runs = append(rep.Runs, results)
	return nil
}

// Result is one column's run.
type Result struct {
	// Scheduler names the column (Column.Name).
	Scheduler string `json:"scheduler"`
	Column    Column `json:"column"`
	Jobs      int    `json:"jobs"`
	// Seed is the workload's seed in this run.
	Seed int64 `json:"seed"`
	// Scheduled jobs were bound to a node; Pending ones never were (given
	// up after maxWait). Refused ones were found unschedulable at least once.
	// Finished jobs ran to their end; the others were given up.
	Scheduled int `json:"scheduled"`
	Pending   int `json:"pending"`
	Refused   int `json:"refused"`
	Finished  int `json:"finished"`
	RDMAJobs  int `json:"rdmaJobs"`
	// Job completion time (submission to end, waiting included) of the
	// finished jobs, and the makespan (first submission to the last
	// finished job's end), in hours of workload time.
	JCTMeanHours  float64 `json:"jctMeanHours"`
	JCTP50Hours   float64 `json:"jctP50Hours"`
	JCTP99Hours   float64 `json:"jctP99Hours"`
	MakespanHours float64 `json:"makespanHours"`
	// GPUHoursLost is what RDMA jobs spent beyond their aligned runtime
	// (TimeModel), in GPU-hours: lost to misalignment.
	GPUHoursLost float64 `json:"gpuHoursLost"`
	// PairLevels counts, per level, the GPU-NIC pairs the kubelet handed to
	// RDMA jobs (each GPU with its nearest NIC, as the exporter observed);
	// "unverified" is a GPU of a job that ended before the exporter looked.
	PairLevels map[string]int `json:"gpuNicPairs"`
	// GPUDirectJobs are RDMA jobs that ran with every GPU at PIX/PXB to a
	// NIC; the share is over all RDMA jobs, those that never ran included.
	GPUDirectJobs  int     `json:"gpuDirectJobs"`
	GPUDirectShare float64 `json:"gpuDirectShare"`
	// Plans are jobs the exporter saw with a scheduler's plan (not "none");
	// PlansFollowed are those whose devices were the plan's ("matched").
	Plans         int `json:"plans"`
	PlansFollowed int `json:"plansFollowed"`
	// MultiPodJobs are the jobs of more than one pod. RailAlignedJobs are
	// those that need a NIC and ran with every GPU eligible and every pod
	// on one rail set; SplitRailAvoidable those that ran on split rails
	// although one rail set was free on their pods' nodes (a lower bound:
	// splitAvoidable). GangWaitHours is the GPU-time pods of multi-pod jobs
	// held before their job was whole.
	MultiPodJobs       int     `json:"multiPodJobs"`
	RailAlignedJobs    int     `json:"railAlignedJobs"`
	SplitRailAvoidable int     `json:"splitRailAvoidable"`
	GangWaitHours      float64 `json:"gangWaitHours"`
	Fragmentation      Frag    `json:"fragmentation"`
	// Creation to bound, and creation to Running, of each pod bound at the
	// moment it was created (not later, when GPUs freed up), on the wall
	// clock: the scheduler's and kubelet's latency while the replay steps
	// them one pod at a time, not workload time, which they never stretch.
	BindP50Ms    int64 `json:"bindLatencyP50Ms"`
	BindP99Ms    int64 `json:"bindLatencyP99Ms"`
	RunningP50Ms int64 `json:"runningLatencyP50Ms"`
	RunningP99Ms int64 `json:"runningLatencyP99Ms"`
	// Seconds is the run's length in workload time.
	Seconds  float64  `json:"seconds"`
	Timeline []Sample `json:"timeline"`
}

// Frag, in workload time, is aligned capacity left unused while RDMA jobs waited: GPUs with a
// PIX/PXB NIC that sat free (or held by jobs without RDMA) while at least
// one RDMA job was not yet bound.
type Frag struct {
	// WaitingSeconds had at least one RDMA job waiting.
	WaitingSeconds float64 `json:"waitingSeconds"`
	// IdleAlignedGPUSeconds is free aligned GPUs integrated over that time;
	// MeanIdleAlignedGPUs is it over WaitingSeconds.
	IdleAlignedGPUSeconds float64 `json:"idleAlignedGPUSeconds"`
	MeanIdleAlignedGPUs   float64 `json:"meanIdleAlignedGPUs"`
	// HeldByNonRDMAGPUSeconds is aligned GPUs held by jobs that use no NIC,
	// integrated over the same time.
	HeldByNonRDMAGPUSeconds float64 `json:"heldByNonRDMAGPUSeconds"`
}

// Sample is the cluster at one moment: GPUs in use by the level of their
// nearest NIC ("noRDMA" for jobs without a NIC, "unverified" before the
// exporter looked), and jobs waiting to be bound.
type Sample struct {
	T       float64        `json:"t"`
	GPUs    map[string]int `json:"gpus"`
	Waiting int            `json:"waiting"`
}

// Series are the sample keys in the order the chart stacks them.
var Series = []string{"PIX", "PXB", "PHB", "NODE", "SYS", "unverified", "noRDMA"}

// summarize does the accounting of one run; it is pure, so tests can check
// it on records whose answer is known by hand. Records are in workload
// time, but for the pods' wall-clock latencies.
func summarize(scheduler string, recs []*record, nodes []nodeInfo, end time.Duration) Result {
	res := Result{Scheduler: scheduler, Jobs: len(recs), PairLevels: map[string]int{}, Seconds: round2(end.Seconds())}
	byNode := map[string]nodeInfo{}
	for _, n := range nodes {
		byNode[n.Name] = n
	}
	var bind, run, jct []time.Duration
	lastEnd := time.Duration(0)
	lost := time.Duration(0) // GPU-time
	var gangHeld time.Duration
	for _, r := range recs {
		if len(r.Pods) > 1 {
			res.MultiPodJobs++
			gangHeld += gangWait(r, end)
			if r.SplitAvoidable {
				res.SplitRailAvoidable++
			}
		}
		if r.Running != never && r.Ended != never {
			res.Finished++
			jct = append(jct, r.Ended-r.At)
			lastEnd = max(lastEnd, r.Ended)
			if r.RDMA {
				lost += time.Duration(r.totalGPUs()) * max(0, r.Runtime-r.Duration)
			}
		}
		if r.RDMA {
			res.RDMAJobs++
		}
		if r.Refused {
			res.Refused++
		}
		if r.Bound == never {
			res.Pending++
			continue
		}
		res.Scheduled++
		for _, pr := range r.Pods {
			if pr.Bound == r.At {
				bind = append(bind, pr.BindLatency)
			}
			if pr.Running == r.At {
				run = append(run, pr.RunLatency)
			}
			if pr.Observed != nil && pr.Observed.Plan != "none" {
				res.Plans++
				if pr.Observed.Plan == "matched" {
					res.PlansFollowed++
				}
			}
		}
		if !r.RDMA || r.Running == never {
			continue
		}
		var levels []string
		for _, pr := range r.Pods {
			levels = append(levels, pr.gpuLevels(byNode[pr.Node])...)
		}
		eligible := len(levels) > 0
		for _, l := range levels {
			res.PairLevels[l]++
			lv, err := topology.ParseLevel(l)
			eligible = eligible && err == nil && lv.GPUDirectCapable()
		}
		if eligible {
			res.GPUDirectJobs++
			if len(r.Pods) > 1 && !r.SplitRails {
				res.RailAlignedJobs++
			}
		}
	}
	if res.RDMAJobs > 0 {
		res.GPUDirectShare = round2(float64(res.GPUDirectJobs) / float64(res.RDMAJobs))
	}
	first := firstSubmission(recs)
	if len(jct) > 0 {
		sum := time.Duration(0)
		for _, d := range jct {
			sum += d
		}
		res.JCTMeanHours = round2(sum.Hours() / float64(len(jct)))
		p50, p99 := rank(jct, 50), rank(jct, 99)
		res.JCTP50Hours, res.JCTP99Hours = round2(p50.Hours()), round2(p99.Hours())
		res.MakespanHours = round2((lastEnd - first).Hours())
	}
	res.GPUHoursLost = round2(lost.Hours())
	res.GangWaitHours = round2(gangHeld.Hours())
	res.BindP50Ms, res.BindP99Ms = percentiles(bind)
	res.RunningP50Ms, res.RunningP99Ms = percentiles(run)
	res.Timeline, res.Fragmentation = timeline(recs, byNode, end)
	return res
}

// gpuLevels is the level of each GPU the pod got, from the exporter's
// observation, or "unverified" where there is none.
func (r *podRecord) gpuLevels(n nodeInfo) []string {
	var out []string
	for _, pos := range r.Got {
		level := "unverified"
		if r.Observed != nil && pos < len(n.GPUs) {
			for _, g := range r.Observed.GPUs {
				if g.BusID == n.GPUs[pos] && g.Level != "" {
					level = g.Level
				}
			}
		}
		out = append(out, level)
	}
	return out
}

func firstSubmission(recs []*record) time.Duration {
	if len(recs) == 0 {
		return 0
	}
	first := recs[0].At
	for _, r := range recs {
		first = min(first, r.At)
	}
	return first
}

// percentiles are p50 and p99 in milliseconds, nearest rank.
func percentiles(d []time.Duration) (int64, int64) {
	if len(d) == 0 {
		return 0, 0
	}
	return rank(d, 50).Milliseconds(), rank(d, 99).Milliseconds()
}

// rank is the p-th percentile of d by nearest rank; it sorts d.
func rank(d []time.Duration, p int) time.Duration {
	slices.Sort(d)
	return d[max(0, (p*len(d)+99)/100-1)]
}

// timelineStep is the chart's resolution; the fragmentation integral uses
// a finer one.
func timelineStep(end time.Duration) time.Duration {
	return max(250*time.Millisecond, (end / 240).Round(50*time.Millisecond))
}

// fragStep is the fragmentation integral's step: 50 ms, or a 4000th of a
// long run.
func fragStep(end time.Duration) time.Duration { return max(50*time.Millisecond, end/4000) }

// timeline samples the cluster over the run and integrates fragmentation.
func timeline(recs []*record, nodes map[string]nodeInfo, end time.Duration) ([]Sample, Frag) {
	var samples []Sample
	var f Frag
	totalAligned := 0
	for _, n := range nodes {
		totalAligned += n.alignedCount()
	}
	step := timelineStep(end)
	nextSample := time.Duration(0)
	fstep := fragStep(end)
	for t := time.Duration(0); t <= end; t += fstep {
		s := Sample{T: round2(t.Seconds()), GPUs: map[string]int{}}
		usedAligned, nonRDMAAligned, waitingRDMA := 0, 0, 0
		for _, r := range recs {
			if r.At <= t && (r.Bound == never || t < r.Bound) && (r.Ended == never || t < r.Ended) {
				s.Waiting++
				if r.RDMA {
					waitingRDMA++
				}
			}
			// A pod holds its GPUs from Running to its job's end.
			if r.Ended != never && t >= r.Ended {
				continue
			}
			for _, pr := range r.Pods {
				if pr.Running == never || t < pr.Running {
					continue
				}
				n := nodes[pr.Node]
				levels := pr.gpuLevels(n)
				for i, pos := range pr.Got {
					if !r.RDMA {
						s.GPUs["noRDMA"]++
					} else {
						s.GPUs[levels[i]]++
					}
					if pos < len(n.Aligned) && n.Aligned[pos] {
						usedAligned++
						if !r.RDMA {
							nonRDMAAligned++
						}
					}
				}
			}
		}
		if waitingRDMA > 0 {
			sec := fstep.Seconds()
			f.WaitingSeconds += sec
			f.IdleAlignedGPUSeconds += float64(totalAligned-usedAligned) * sec
			f.HeldByNonRDMAGPUSeconds += float64(nonRDMAAligned) * sec
		}
		if t >= nextSample {
			samples = append(samples, s)
			nextSample += step
		}
	}
	if f.WaitingSeconds > 0 {
		f.MeanIdleAlignedGPUs = round2(f.IdleAlignedGPUSeconds / f.WaitingSeconds)
	}
	f.WaitingSeconds, f.IdleAlignedGPUSeconds, f.HeldByNonRDMAGPUSeconds = round2(f.WaitingSeconds), round2(f.IdleAlignedGPUSeconds), round2(f.HeldByNonRDMAGPUSeconds)
	return samples, f
}
