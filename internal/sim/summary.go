package sim

import (
	"slices"
	"time"

	"github.com/nicaffinity/nicaffinity/pkg/topology"
)

// Report is a whole simulation: the specs, the offline bound and one result
// per scheduler.
type Report struct {
	Cluster     ClusterSpec  `json:"cluster"`
	Workload    WorkloadSpec `json:"workload"`
	Nodes       int          `json:"nodes"`
	GPUs        int          `json:"gpus"`
	AlignedGPUs int          `json:"alignedGPUs"`
	Bound       Bound        `json:"offlineBound"`
	Results     []Result     `json:"results"`
}

// NewReport starts a report of a plan.
func NewReport(p *Plan) *Report {
	return &Report{Cluster: p.Cluster, Workload: p.Workload, Nodes: len(p.info), GPUs: p.GPUs(), AlignedGPUs: p.AlignedGPUs(), Bound: p.bound}
}

// Result is one column's run.
type Result struct {
	// Scheduler names the column (Column.Name).
	Scheduler string `json:"scheduler"`
	Column    Column `json:"column"`
	Jobs      int    `json:"jobs"`
	// Scheduled jobs were bound to a node; Pending ones never were (given
	// up after maxWait). Refused ones were found unschedulable at least once.
	Scheduled int `json:"scheduled"`
	Pending   int `json:"pending"`
	Refused   int `json:"refused"`
	RDMAJobs  int `json:"rdmaJobs"`
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
	Plans         int  `json:"plans"`
	PlansFollowed int  `json:"plansFollowed"`
	Fragmentation Frag `json:"fragmentation"`
	// PodsPerSecond is bound jobs over the time from the first submission
	// to the last bind: arrivals pace it here (nicaffinity-sim bench measures
	// the scheduler's own rate).
	PodsPerSecond float64 `json:"podsPerSecond"`
	// Submission to bound, and submission to Running.
	BindP50Ms    int64    `json:"bindLatencyP50Ms"`
	BindP99Ms    int64    `json:"bindLatencyP99Ms"`
	RunningP50Ms int64    `json:"runningLatencyP50Ms"`
	RunningP99Ms int64    `json:"runningLatencyP99Ms"`
	Seconds      float64  `json:"seconds"`
	Timeline     []Sample `json:"timeline"`
}

// Frag is aligned capacity left unused while RDMA jobs waited: GPUs with a
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
// it on records whose answer is known by hand.
func summarize(scheduler string, recs []*record, nodes []nodeInfo, end time.Duration) Result {
	res := Result{Scheduler: scheduler, Jobs: len(recs), PairLevels: map[string]int{}, Seconds: round2(end.Seconds())}
	byNode := map[string]nodeInfo{}
	for _, n := range nodes {
		byNode[n.Name] = n
	}
	var bind, run []time.Duration
	lastBind := time.Duration(0)
	for _, r := range recs {
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
		bind = append(bind, r.Bound-r.At)
		lastBind = max(lastBind, r.Bound)
		if r.Running != never {
			run = append(run, r.Running-r.At)
		}
		if r.Observed != nil && r.Observed.Plan != "none" {
			res.Plans++
			if r.Observed.Plan == "matched" {
				res.PlansFollowed++
			}
		}
		if !r.RDMA || r.Running == never {
			continue
		}
		levels := r.gpuLevels(byNode[r.Node])
		eligible := len(levels) > 0
		for _, l := range levels {
			res.PairLevels[l]++
			lv, err := topology.ParseLevel(l)
			eligible = eligible && err == nil && lv.GPUDirectCapable()
		}
		if eligible {
			res.GPUDirectJobs++
		}
	}
	if res.RDMAJobs > 0 {
		res.GPUDirectShare = round2(float64(res.GPUDirectJobs) / float64(res.RDMAJobs))
	}
	if first := firstSubmission(recs); lastBind > first {
		res.PodsPerSecond = round2(float64(res.Scheduled) / (lastBind - first).Seconds())
	}
	res.BindP50Ms, res.BindP99Ms = percentiles(bind)
	res.RunningP50Ms, res.RunningP99Ms = percentiles(run)
	res.Timeline, res.Fragmentation = timeline(recs, byNode, end)
	return res
}

// gpuLevels is the level of each GPU the job got, from the exporter's
// observation, or "unverified" where there is none.
func (r *record) gpuLevels(n nodeInfo) []string {
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
	slices.Sort(d)
	rank := func(p int) time.Duration { return d[max(0, (p*len(d)+99)/100-1)] }
	return rank(50).Milliseconds(), rank(99).Milliseconds()
}

// timelineStep is the chart's resolution; the fragmentation integral uses
// a finer one.
func timelineStep(end time.Duration) time.Duration {
	return max(250*time.Millisecond, (end / 240).Round(50*time.Millisecond))
}

const fragStep = 50 * time.Millisecond

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
	for t := time.Duration(0); t <= end; t += fragStep {
		s := Sample{T: round2(t.Seconds()), GPUs: map[string]int{}}
		usedAligned, nonRDMAAligned, waitingRDMA := 0, 0, 0
		for _, r := range recs {
			if r.At <= t && (r.Bound == never || t < r.Bound) && (r.Ended == never || t < r.Ended) {
				s.Waiting++
				if r.RDMA {
					waitingRDMA++
				}
			}
			// A job holds its GPUs from Running to its end.
			if r.Running == never || t < r.Running || (r.Ended != never && t >= r.Ended) {
				continue
			}
			n := nodes[r.Node]
			levels := r.gpuLevels(n)
			for i, pos := range r.Got {
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
		if waitingRDMA > 0 {
			sec := fragStep.Seconds()
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
