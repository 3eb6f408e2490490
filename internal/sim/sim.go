// Package sim replays a workload of GPU jobs on a simulated cluster (real
// control plane, real exporters, simulated kubelets) through one scheduler
// profile and reports what the jobs really got.
package sim

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"k8s.io/kubernetes/pkg/features"
	"k8s.io/kubernetes/pkg/scheduler"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/nicaffinity/nicaffinity/internal/cluster"
	"github.com/nicaffinity/nicaffinity/internal/controlplane"
	"github.com/nicaffinity/nicaffinity/internal/kubeletsim"
	"github.com/nicaffinity/nicaffinity/internal/memapi"
	"github.com/nicaffinity/nicaffinity/internal/schedulerrun"
	"github.com/nicaffinity/nicaffinity/pkg/annotations"
	"github.com/nicaffinity/nicaffinity/pkg/dra"
	"github.com/nicaffinity/nicaffinity/pkg/machines"
	"github.com/nicaffinity/nicaffinity/pkg/nrt"
	"github.com/nicaffinity/nicaffinity/pkg/plugins/nicaffinity"
	"github.com/nicaffinity/nicaffinity/pkg/topology"
)

// Schedulers are the two profiles every simulation compares.
var Schedulers = []string{"nicaffinity-scheduler", "default-scheduler"}

// Column is one run of a simulation: a scheduler profile, and what the
// nodes' kubelets do with its plans.
type Column struct {
	Name      string `json:"name"`
	Scheduler string `json:"scheduler"`
	// Kubelet is the simulated kubelet's GPU policy: kubeletsim.BestEffort
	// is the NVIDIA device plugin alone (a plan is advice), kubeletsim.Proxy
	// puts nicaffinity's allocation proxy in front of it.
	Kubelet string `json:"kubelet"`
	// Policy is nicaffinity's policy for every job (the nicaffinity.io/policy
	// annotation); empty for the default scheduler.
	Policy string `json:"policy,omitempty"`
	// Claims is how a DRA column's jobs claim devices (ClaimsGenerated,
	// ClaimsPCIeRoot, ClaimsUnconstrained); empty with device plugins.
	Claims string `json:"claims,omitempty"`
	// Gang makes each multi-pod job a PodGroup (placed whole or not at
	// all) and names its job to the plugin (a job label), so its pods
	// follow the job's rails. Other columns' pods are plain pods.
	Gang bool `json:"gang,omitempty"`
	// AlignmentWait is every pod's nicaffinity.io/alignment-wait (policy
	// bounded); empty: the plugin's alignmentWait.
	AlignmentWait string `json:"alignmentWait,omitempty"`
}

// Columns are the runs every simulation compares, on the same workload: the
// policies with the allocation proxy (so that placements happen), the
// required policy as advice to the device plugin alone, the default
// (bounded) policy with the proxy and each multi-pod job a gang on its rails, the default scheduler
// with each multi-pod job a gang (upstream's GangScheduling: like for like
// with gangs+rails), and the default scheduler, which the report compares
// each with. The default scheduler is last.
var Columns = []Column{
	{Name: "bounded+proxy", Scheduler: Schedulers[0], Kubelet: kubeletsim.Proxy, Policy: annotations.PolicyBounded},
	{Name: "required+proxy", Scheduler: Schedulers[0], Kubelet: kubeletsim.Proxy, Policy: annotations.PolicyRequired},
	{Name: "preferred+proxy", Scheduler: Schedulers[0], Kubelet: kubeletsim.Proxy, Policy: annotations.PolicyPreferred},
	{Name: "required (advice)", Scheduler: Schedulers[0], Kubelet: kubeletsim.BestEffort, Policy: annotations.PolicyRequired},
	{Name: "gangs+rails", Scheduler: Schedulers[0], Kubelet: kubeletsim.Proxy, Policy: annotations.PolicyBounded, Gang: true},
	{Name: "default-scheduler+gangs", Scheduler: Schedulers[1], Kubelet: kubeletsim.BestEffort, Gang: true},
	{Name: "default-scheduler", Scheduler: Schedulers[1], Kubelet: kubeletsim.BestEffort},
}

// ColumnsNamed picks columns by name, in Columns then DRAColumns order.
func ColumnsNamed(names []string) ([]Column, error) {
	var known []string
	var cols []Column
	for _, c := range slices.Concat(Columns, DRAColumns) {
		known = append(known, c.Name)
		if slices.Contains(names, c.Name) {
			cols = append(cols, c)
		}
	}
	for _, n := range names {
		if !slices.Contains(known, n) {
			return nil, fmt.Errorf("no column %q (known: %s)", n, strings.Join(known, ", "))
		}
	}
	return cols, nil
}

// Plan is a simulation ready to run: the nodes resolved, the jobs laid out
// in time, and the bound computed.
type Plan struct {
	Cluster  ClusterSpec
	Workload WorkloadSpec
	nodes    []cluster.NodeSpec
	info     []nodeInfo
	machines []dra.Machine // one per pool
	jobs     []job
	bound    Bound
}

// Prepare resolves every pool's machine (building the bundled sysfs shapes
// once to read their topology) and checks the workload fits the cluster.
func Prepare(c ClusterSpec, w WorkloadSpec) (*Plan, error) {
	p := &Plan{Cluster: c, Workload: w}
	for _, pool := range c.Pools {
		spec, err := pool.node()
		if err != nil {
			return nil, fmt.Errorf("pool %s: %w", pool.Name, err)
		}
		topo := spec.Topology
		if spec.Machine != nil {
			if topo, err = machines.Discover("", spec.Machine); err != nil {
				return nil, fmt.Errorf("pool %s: %w", pool.Name, err)
			}
		}
		p.machines = append(p.machines, dra.Machine{Name: pool.machineName(), Topology: topo})
		caps, err := boundCapacity(pool.Name, topo)
		if err != nil {
			return nil, fmt.Errorf("pool %s: %w", pool.Name, err)
		}
		for k := 0; k < pool.Count; k++ {
			// Every node of a pool is handed the topology discovered here:
			// the exporters publish what they would discover from the tree
			// (replays never change a tree), and no replay writes one per node.
			s := cluster.NodeSpec{Topology: topo}
			s.Name, s.Policy = fmt.Sprintf("%s-%d", pool.Name, k), kubeletsim.BestEffort
			p.nodes = append(p.nodes, s)
			p.info = append(p.info, describe(s.Name, topo, caps))
		}
	}
	if w.trace != nil {
		if err := w.trace.check(p.info, w.TimeModel); err != nil {
			return nil, err
		}
		p.jobs = slices.Clone(w.trace.jobs)
	} else {
		if err := w.check(p.info); err != nil {
			return nil, err
		}
		p.jobs = w.draw(p.GPUs())
	}
	p.bound = delayBound(p.jobs, p.info, w.MaxWait.Std())
	return p, nil
}

// Nodes is the cluster's node count.
func (p *Plan) Nodes() int { return len(p.info) }

// GPUs is the cluster's GPU count.
func (p *Plan) GPUs() int {
	n := 0
	for _, i := range p.info {
		n += len(i.GPUs)
	}
	return n
}

// AlignedGPUs is how many GPUs have a PIX/PXB RDMA NIC.
func (p *Plan) AlignedGPUs() int {
	n := 0
	for _, i := range p.info {
		n += i.alignedCount()
	}
	return n
}

// Offered is what a plan's jobs ask of its cluster: their work in GPU-hours
// (at their aligned runtimes), the time over which they arrive, and the
// work's share of the cluster's GPU-hours in that time (0 when they all
// arrive at once: a backlog, whose work is then WorkHours / GPUs hours of
// the whole cluster).
type Offered struct {
	WorkHours, ArrivalHours, Offered float64
}

// Offered is the plan's offered load.
func (p *Plan) Offered() Offered {
	var l Offered
	first, last := time.Duration(-1), time.Duration(0)
	for _, j := range p.jobs {
		l.WorkHours += float64(j.totalGPUs()) * j.Duration.Hours()
		if first < 0 || j.At < first {
			first = j.At
		}
		last = max(last, j.At)
	}
	if first >= 0 {
		l.ArrivalHours = (last - first).Hours()
	}
	if l.ArrivalHours > 0 && p.GPUs() > 0 {
		l.Offered = l.WorkHours / (float64(p.GPUs()) * l.ArrivalHours)
	}
	return l
}

// Bound is the bound (delays allowed) of the plan's workload on its cluster.
func (p *Plan) Bound() Bound { return p.bound }

// Jobs is the number of jobs.
func (p *Plan) Jobs() int { return len(p.jobs) }

// Pods is how many pods one column's replay creates.
func (p *Plan) Pods() int {
	n := 0
	for _, j := range p.jobs {
		n += max(1, j.Pods)
	}
	return n
}

// MultiPodJobs is the number of jobs of more than one pod: without them,
// a Gang column places every pod as the same column without Gang does.
func (p *Plan) MultiPodJobs() int {
	n := 0
	for _, j := range p.jobs {
		if j.Pods > 1 {
			n++
		}
	}
	return n
}

// WithoutIdleGangs drops the Gang columns when no plan has a multi-pod
// job: their pods would be those of the column without Gang, pod for pod,
// so replaying them shows nothing and costs a cluster each.
func WithoutIdleGangs(plans []*Plan, cols []Column) ([]Column, []string) {
	for _, p := range plans {
		if p.MultiPodJobs() > 0 {
			return cols, nil
		}
	}
	var kept []Column
	var dropped []string
	for _, c := range cols {
		if c.Gang {
			dropped = append(dropped, c.Name)
			continue
		}
		kept = append(kept, c)
	}
	return kept, dropped
}

// Progress is a run's state, reported about twice a second: Elapsed on the
// wall clock, Workload on the replay's virtual clock.
type Progress struct {
	Scheduler                                string
	Elapsed, Workload                        time.Duration
	Jobs, Submitted, Waiting, Running, Ended int
}

// replayWriteInterval is the exporters' write spacing in a replay. On the
// virtual clock it only delays the moment a node's object is current (the
// replay waits for it), so it is short; zero would let a burst of pod
// changes on one node write once per change.
const replayWriteInterval = 5 * time.Millisecond

// never marks a moment that did not come.
const never = time.Duration(-1)

// record is what happened to one job, in workload time since the first
// submission: Bound when its last pod was bound, Running when its last pod
// ran (a job's pods run together), Ended when it ended or was given up.
type record struct {
	job
	Bound, Running, Ended time.Duration
	Pods                  []podRecord
	// Worst is the worst level of the job's GPUs to the NICs they may use,
	// over all its pods, and Runtime what the time model makes of Duration
	// on them (the job communicates at the speed of its worst pod); both
	// set when the job is Running. Runtime starts as Duration, so a job
	// whose assignment the kubelet no longer knows runs its aligned time.
	Worst   topology.Level
	Runtime time.Duration
	Refused bool
	// SplitRails is set, for a multi-pod RDMA job, when its pods' GPUs are
	// aligned to NICs of different rail sets (or some to none with a
	// rail): its traffic crosses the spine. Set when the job is Running.
	SplitRails bool
	// SplitAvoidable: split, although one rail set was free on the nodes
	// its pods got (splitAvoidable).
	SplitAvoidable bool
}

// podRecord is one pod of a job.
type podRecord struct {
	Name           string
	Node           string
	Bound, Running time.Duration
	Got            []int // GPU positions on the node, from the kubelet
	Observed       *annotations.Observed
	// BindLatency and RunLatency are from creation to bound and to Running
	// on the wall clock: the scheduler's and kubelet's latency, not
	// workload time.
	BindLatency, RunLatency time.Duration
	assignment              kubeletsim.Assignment
	observedRaw             string // the annotation Observed was parsed from
}

// started fills a Running job's level and runtime from what the kubelets
// handed its pods.
func (r *record) started(m TimeModel, nodes map[string]nodeInfo) {
	r.Worst = topology.LevelPIX
	for _, pr := range r.Pods {
		r.Worst = max(r.Worst, nodes[pr.Node].worst(pr.assignment))
	}
	r.SplitRails = r.RDMA && len(r.Pods) > 1 && !r.oneRailSet(nodes)
	r.Runtime = m.RuntimeOnRails(r.Duration, r.GPUs, r.RDMA, r.Worst, r.SplitRails)
}

// oneRailSet reports whether every pod's GPUs are aligned to NICs with
// rails, and the pods' rail sets are equal.
func (r *record) oneRailSet(nodes map[string]nodeInfo) bool {
	var first []string
	for i, pr := range r.Pods {
		rails, ok := nodes[pr.Node].railsOf(pr.Got)
		if !ok || i > 0 && !slices.Equal(rails, first) {
			return false
		}
		first = rails
	}
	return true
}

// RunOptions are how a replay runs, never what it replays.
type RunOptions struct {
	// Progress, if set, is told how the replay advances.
	Progress func(Progress)
	// APIServer runs the replay on a real kube-apiserver and etcd (the
	// reference) instead of the in-memory API (package memapi). DRA
	// columns always do: their claims follow the ResourceClaim
	// controller's finalizers and admission, which the in-memory API
	// leaves out.
	APIServer bool
	// memapi are the in-memory API's options (a test's faults).
	memapi []memapi.Option
}

// controlPlane starts the replay's API.
func (o RunOptions) controlPlane(ctx context.Context, col Column) (*controlplane.ControlPlane, error) {
	if o.APIServer || col.Kubelet == kubeletsim.DRA {
		return controlplane.New(ctx, controlplane.WithWorkloads())
	}
	return controlplane.NewInMemory(o.memapi...)
}

// Run replays the plan's workload through a column's scheduler, with its
// kubelets, on a fresh cluster.
func Run(ctx context.Context, p *Plan, col Column, o RunOptions) (Result, error) {
	nodes := slices.Clone(p.nodes)
	for i := range nodes {
		nodes[i].Policy = col.Kubelet
	}
	enableWorkloads()
	cp, err := o.controlPlane(ctx, col)
	if err != nil {
		return Result{}, err
	}
	defer cp.Stop()
	opts := cluster.DefaultOptions()
	opts.RailSource = nrt.RailFromPCIRank
	// No heartbeat: a write that changes nothing would move pods in the
	// scheduler's queue at a moment the wall clock picks.
	opts.MinWriteInterval, opts.ResyncPeriod = replayWriteInterval, 24*time.Hour
	opts.StaticTopology = true
	cl, err := cluster.New(ctx, cp, opts, nodes...)
	if err != nil {
		return Result{}, err
	}
	defer cl.Stop()
	if _, err := cp.Kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "nicaffinity-system"}}, metav1.CreateOptions{}); err != nil {
		return Result{}, err
	}
	cfg, err := replayConfig()
	if err != nil {
		return Result{}, err
	}
	// The plugin's bounded waits run on the replay's virtual clock.
	clk := testingclock.NewFakeClock(virtualEpoch)
	so := replaySchedulerOptions()
	so.PluginOptions = []nicaffinity.Option{nicaffinity.WithClock(clk)}
	sched, err := schedulerrun.Run(ctx, cp, cfg, cp.TmpDir, so)
	if err != nil {
		return Result{}, err
	}
	defer sched.Stop()
	if col.Kubelet == kubeletsim.DRA {
		draCtx, stop := context.WithCancel(ctx)
		defer stop()
		if err := startDRA(draCtx, cp, p, col); err != nil {
			return Result{}, err
		}
	}
	recs, end, err := replay(ctx, cp, cl, sched, clk, p, col, o.Progress)
	if err != nil {
		return Result{}, err
	}
	res := summarize(col.Name, recs, p.info, end)
	res.Column = col
	return res, nil
}

// enableWorkloads sets the replays' feature gates in this process:
// kube-scheduler reads its gates from the process-wide registry, and every
// column's scheduler runs with them, so that only the pods (PodGroups or
// plain) tell the columns apart.
//
//   - GenericWorkload on, as the shipped scheduler runs
//     (--feature-gates=GenericWorkload=true).
//   - OpportunisticBatching off. With it, a pod whose signature matches the
//     last one's may take that cycle's scores instead of its own, but only
//     while they are younger than 500 ms of the wall clock (the
//     framework's maxBatchAge): which pods reuse scores would depend on the
//     machine's speed, and the replay's figures with it (large-scenario
//     runs differed by it). Batching reuses scores to save time; on the
//     virtual clock every pod is scored afresh.
func enableWorkloads() {
	workloadsOnce.Do(func() {
		gates := map[string]bool{string(features.GenericWorkload): true, string(features.OpportunisticBatching): false}
		if err := utilfeature.DefaultMutableFeatureGate.SetFromMap(gates); err != nil {
			panic(fmt.Sprintf("feature gates %v: %v", gates, err)) // gates of the linked release: cannot fail
		}
	})
}

var workloadsOnce sync.Once

// replayConfig is the shipped configuration with the default profile
// beside it, and what the virtual clock needs of the plugin: no freshness
// limit (an object's age on the wall clock is not workload time) and
// reservations that outlast any settle.
func replayConfig() (string, error) {
	cfg, err := schedulerrun.ShippedConfig()
	if err != nil {
		return "", err
	}
	return schedulerrun.Edit(schedulerrun.WithDefaultProfile(cfg), func(doc map[string]any) error {
		profiles, _ := doc["profiles"].([]any)
		for _, p := range profiles {
			m, _ := p.(map[string]any)
			pcs, _ := m["pluginConfig"].([]any)
			for _, pc := range pcs {
				c, _ := pc.(map[string]any)
				if c["name"] != "NICAffinity" {
					continue
				}
				args, _ := c["args"].(map[string]any)
				if args == nil {
					return fmt.Errorf("the NICAffinity pluginConfig has no args")
				}
				args["topologyMaxAge"] = "0s"
				args["reservationTimeout"] = "24h"
			}
		}
		return nil
	})
}

// replaySchedulerOptions step the scheduler (schedulerrun's settle), break
// ties deterministically (tiebreak.go) and take backoff off the wall clock.
//
// Backoff: kube-scheduler's configuration cannot turn it off (validation
// wants podInitialBackoffSeconds >= 1), but scheduler.New takes a maximum
// of 0, which its backoff queue reads as "no backoff". On the virtual
// clock every settle takes no workload time, so a backoff of seconds would
// only decide, by the wall clock, whether a requeued pod waits in the
// backoff queue or the active queue, and so which pod goes first. Without
// it every requeued pod goes to the active queue, in the queue's order
// (priority, then when it was last queued), which follows from the
// sequence of attempts alone. The periodic flush of pods parked longer than
// podMaxInUnschedulablePodsDuration runs on a wall-clock ticker, so it is
// pushed out of reach: only queueing hints move parked pods.
func replaySchedulerOptions() schedulerrun.Options {
	return schedulerrun.Options{
		Plugins:  tieBreakPlugins(),
		Profiles: deterministicProfiles,
		Scheduler: []scheduler.Option{
			scheduler.WithPodMaxBackoffSeconds(0),
			scheduler.WithPodMaxInUnschedulablePodsDuration(100 * 365 * 24 * time.Hour),
		},
		Settle: true,
	}
}
