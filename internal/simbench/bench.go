// Package simbench measures the scheduler with and without nicaffinity on
// one control plane (scheduler_perf's method): nicaffinity-sim bench. It is
// a different tool from the simulator (internal/sim), whose profiles it
// shares.
package simbench

import (
	"context"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"runtime/metrics"
	"runtime/pprof"
	"slices"
	"sort"
	"sync"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/component-base/metrics/legacyregistry"

	"github.com/k8stopologyawareschedwg/noderesourcetopology-api/pkg/apis/topology/v1alpha2"
	dto "github.com/prometheus/client_model/go"

	"github.com/nicaffinity/nicaffinity/internal/controlplane"
	"github.com/nicaffinity/nicaffinity/internal/schedulerrun"
	"github.com/nicaffinity/nicaffinity/internal/sim"
	"github.com/nicaffinity/nicaffinity/pkg/devices"
	"github.com/nicaffinity/nicaffinity/pkg/exporter"
	"github.com/nicaffinity/nicaffinity/pkg/machines"
	"github.com/nicaffinity/nicaffinity/pkg/nrt"
	"github.com/nicaffinity/nicaffinity/pkg/plugins/nicaffinity"
	"github.com/nicaffinity/nicaffinity/pkg/request"
	"github.com/nicaffinity/nicaffinity/pkg/topology"
)

// BenchSpec is a scheduler_perf-style measurement.
type BenchSpec struct {
	Nodes int
	// Pods per batch; each round runs A B B A (the profile under test, the
	// default profile, the default profile, the profile under test).
	Pods int
	// Rounds repeats the batches in one process (one set of nodes), the
	// order turning round after round (A B B A, then B A A B), so that one
	// run gives several ratios, half of them in each order.
	Rounds int
	// DefaultFirst starts with B A A B instead.
	DefaultFirst bool
	// SchedulerConfig replaces the shipped KubeSchedulerConfiguration; it
	// must have the profiles under test (the default-scheduler profile is
	// added).
	SchedulerConfig string
	// Profiles are the profiles under test, each measured against the
	// default profile in rounds of its own. Default: nicaffinity-scheduler.
	Profiles []string
	// Workload is WorkloadGPU (every pod one GPU and RDMA, the default) or
	// WorkloadMixed.
	Workload string
	// NoiseFloor adds NoiseProfile, a second profile of the default plugins
	// alone, measured against the default profile like the profiles under
	// test: its ratio would be 1 on a bench without noise, so its rounds
	// show how far a ratio moves on its own.
	NoiseFloor bool
	// MaxDuration, when positive, ends the run early and cleanly: a block
	// of four batches (one profile's A B B A) is not started when the
	// longest block so far would end past MaxDuration from the start, so a
	// run under a wall-clock limit still reports every block it measured.
	// The first block always runs.
	MaxDuration time.Duration
	// Arrival is how a batch reaches the scheduler: ArrivalQueued (the
	// default) or ArrivalBurst.
	Arrival string
	// ProfileDir, when set, receives a CPU profile of each measured batch's
	// timed part, named <profile>-<batch>.pprof: merged per profile (go
	// tool pprof -proto), the two profiles' files compare with -diff_base,
	// which tells where the CPU time one profile adds per pod goes.
	ProfileDir string
}

// NoiseProfile is the default plugins under another profile name.
const NoiseProfile = "default-copy"

// The bench's workloads.
const (
	// WorkloadGPU: every pod takes one GPU and RDMA, on HGX H100 nodes.
	WorkloadGPU = "gpu"
	// WorkloadMixed: what a shared cluster's scheduler also places, in
	// tenths of each batch: 4 one-GPU RDMA pods; 2 pods without GPUs (which
	// nicaffinity must not slow); 2 pods of two-pod jobs, 2 GPUs each, that
	// follow their job's rails (indexed Job labels); 2 pods of one GPU and
	// one SR-IOV VF. A quarter of the nodes are H20 boards with VFs (rails
	// from PCI rank on every node).
	WorkloadMixed = "mixed"
)

// How a batch reaches the scheduler.
const (
	// ArrivalQueued: the scheduler is held while the batch is created, and
	// throughput is timed from its release, with the whole batch in its
	// active queue, to the last binding: the scheduler's own rate (its
	// cycles, its binding calls and what they cost the apiserver), with no
	// pod creation competing for the cores.
	ArrivalQueued = "queued"
	// ArrivalBurst: the batch is created at once by several clients while
	// the scheduler runs, and throughput is timed from the first creation
	// to the last binding, so it also measures how fast the apiserver
	// takes the pods in.
	ArrivalBurst = "burst"
)

// Validate checks the spec; errors name the field.
func (s BenchSpec) Validate() error {
	switch s.Arrival {
	case "", ArrivalQueued, ArrivalBurst:
	default:
		return fmt.Errorf("arrival %q: want %s or %s", s.Arrival, ArrivalQueued, ArrivalBurst)
	}
	switch s.Workload {
	case "", WorkloadGPU, WorkloadMixed:
	default:
		return fmt.Errorf("workload %q: want %s or %s", s.Workload, WorkloadGPU, WorkloadMixed)
	}
	if s.MaxDuration < 0 {
		return fmt.Errorf("max duration %s: want 0 (no limit) or more", s.MaxDuration)
	}
	return nil
}

// BenchResult is what one profile measured over all its batches.
type BenchResult struct {
	Scheduler  string  `json:"scheduler"`
	PodsPerSec float64 `json:"podsPerSecond"`
	// CPUMsPerPod is the process's CPU time (user and system, every
	// component) over the timed part of the batches, per pod: what the
	// profile costs the machine, which the wall-clock throughput shows only
	// once the cores are all busy.
	CPUMsPerPod float64 `json:"cpuMsPerPod"`
	// GCCPUMsPerPod is the part of it the Go runtime counts as garbage
	// collection (its estimate), and AllocKBPerPod what the process
	// allocated per pod: a profile that allocates more brings cycles on
	// sooner, and each cycle marks every component's heap.
	GCCPUMsPerPod float64 `json:"gcCpuMsPerPod"`
	AllocKBPerPod float64 `json:"allocKBPerPod"`
	// GCCycles is the garbage collection cycles that began in the timed
	// parts of its batches (docs/simulate.md: one more or one fewer moves
	// a batch's CPU time a pod by more than the plugin does).
	GCCycles int `json:"gcCycles"`
	// To bound, as a client sees it: from the scheduler's release with
	// ArrivalQueued, from the pod's creation with ArrivalBurst; either way
	// mostly time in the queue, a whole batch arriving at once.
	LatencyP50Ms float64 `json:"latencyP50Ms"`
	LatencyP99Ms float64 `json:"latencyP99Ms"`
	// The scheduler's own scheduling_attempt_duration_seconds for the
	// profile (algorithm and binding of one pod), interpolated in its
	// buckets as histogram_quantile does.
	AttemptP50Ms float64 `json:"attemptP50Ms"`
	AttemptP99Ms float64 `json:"attemptP99Ms"`
	// ExtensionPoints is framework_extension_point_duration_seconds p99 per
	// extension point (ms): where the profile spends its time.
	ExtensionPointsP50Ms map[string]float64 `json:"extensionPointsP50Ms"`
	ExtensionPointsP99Ms map[string]float64 `json:"extensionPointsP99Ms"`
	// Attempts counts scheduler_schedule_attempts_total by result: more
	// attempts than pods means pods went back to the queue.
	Attempts map[string]int `json:"attempts"`
	// Batching is the scheduler's opportunistic batching for the profile:
	// scheduler_batch_attempts_total by result (hint_used: a pod placed on
	// the node kept from the pod before it, with one Filter call instead
	// of a search) and, as "flushed: reason",
	// scheduler_batch_cache_flushed_total by reason. A profile whose pods
	// batch less does a whole search for more of them.
	Batching map[string]int `json:"batching,omitempty"`
	// NICAffinityFiltersPerPod is how many nodes NICAffinity's Filter ran
	// on per pod (scheduler_plugin_evaluation_total): 0 where PreFilter
	// skipped it, absent from profiles without the plugin.
	NICAffinityFiltersPerPod *float64 `json:"nicaffinityFiltersPerPod,omitempty"`
}

// BenchRound is one A B B A (or B A A B) of a profile against the default.
type BenchRound struct {
	Profile string `json:"profile"`
	// Order is "ABBA" or "BAAB" (B: the default profile).
	Order      string  `json:"order"`
	PodsPerSec float64 `json:"podsPerSecond"`
	DefaultPPS float64 `json:"defaultPodsPerSecond"`
	Ratio      float64 `json:"ratio"`
	// CPURatio is the default profile's CPU time per pod over the
	// profile's, in the round: like Ratio, below 1 when the profile costs
	// more.
	CPURatio float64 `json:"cpuRatio"`
}

// BenchReport is a whole run.
type BenchReport struct {
	Results []BenchResult `json:"results"`
	Rounds  []BenchRound  `json:"rounds"`
	// Ratio is the first profile under test over the default, over all
	// batches.
	Ratio float64 `json:"throughputRatio"`
	// Stopped says why fewer blocks ran than asked for (MaxDuration);
	// empty when all ran.
	Stopped string `json:"stopped,omitempty"`
}

// Bench runs the batches against one apiserver with Nodes HGX H100 nodes
// (Node objects and published NodeResourceTopology, no kubelets: only
// scheduling is measured).
func Bench(ctx context.Context, spec BenchSpec, progress io.Writer) (*BenchReport, error) {
	report := &BenchReport{}
	if err := spec.Validate(); err != nil {
		return nil, err
	}
	if len(spec.Profiles) == 0 {
		spec.Profiles = sim.Schedulers[:1]
	}
	def := sim.Schedulers[1]
	if spec.NoiseFloor {
		spec.Profiles = append(slices.Clone(spec.Profiles), NoiseProfile)
	}
	all := append(append([]string{}, spec.Profiles...), def)
	return report, bench(ctx, spec, report, all, def, progress)
}

// bench is Bench's body: one control plane, one scheduler, the batches.
func bench(ctx context.Context, spec BenchSpec, report *BenchReport, all []string, def string, progress io.Writer) error {
	began := time.Now()
	cp, err := controlplane.New(ctx)
	if err != nil {
		return err
	}
	defer cp.Stop()
	// The test server's client allows 1000 requests a second; creating
	// pods must not be what limits the measurement.
	cfg := rest.CopyConfig(cp.Config)
	cfg.QPS, cfg.Burst = -1, 0
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	mixed := spec.Workload == WorkloadMixed
	objs, err := populate(ctx, cp, spec.Nodes, mixed, cp.TmpDir, progress)
	if err != nil {
		return err
	}
	beats := make(chan error, 1)
	beatCtx, stopBeats := context.WithCancel(ctx)
	defer stopBeats()
	go func() { beats <- heartbeat(beatCtx, cp, objs, exporter.DefaultConfig("").ResyncPeriod) }()
	if _, err := cp.Kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "nicaffinity-system"}}, metav1.CreateOptions{}); err != nil {
		return err
	}
	sched, err := benchConfig(spec.SchedulerConfig, spec.Profiles)
	if err != nil {
		return err
	}
	running, err := schedulerrun.Run(ctx, cp, sched, cp.TmpDir, schedulerrun.Options{Hold: spec.Arrival != ArrivalBurst})
	if err != nil {
		return err
	}
	defer running.Stop()
	run := &benchRun{spec: spec, kube: kube, sched: running, cp: cp, beats: beats, began: began, def: def, mixed: mixed,
		per: map[string]*batchTotals{}, progress: progress}
	// Warm every profile up first, unmeasured: the first batch after
	// start pays for cold caches and heap growth, which A B B A alone
	// would charge to A.
	for i, s := range all {
		if _, err := runBatch(ctx, kube, run.held(), s, fmt.Sprintf("w%d", i), max(1, spec.Pods/4), mixed, ""); err != nil {
			return fmt.Errorf("warm-up (%s): %v", s, err)
		}
	}
	before, err := legacyregistry.DefaultGatherer.Gather()
	if err != nil {
		return err
	}
	var longest time.Duration
rounds:
	for r := 0; r < max(1, spec.Rounds); r++ {
		for _, p := range spec.Profiles {
			if spec.MaxDuration > 0 && run.n > 0 && time.Since(began)+longest > spec.MaxDuration {
				report.Stopped = fmt.Sprintf("--max-duration %s: stopped before round %d of %s after %s", spec.MaxDuration, r+1, p, time.Since(began).Round(time.Second))
				if progress != nil {
					fmt.Fprintln(progress, "  "+report.Stopped)
				}
				break rounds
			}
			blockStart := time.Now()
			br, err := run.block(ctx, r, p)
			if err != nil {
				return err
			}
			longest = max(longest, time.Since(blockStart))
			report.Rounds = append(report.Rounds, br)
		}
	}
	per := run.per
	after, err := legacyregistry.DefaultGatherer.Gather()
	if err != nil {
		return err
	}
	for _, s := range all {
		if per[s] == nil {
			continue // stopped by MaxDuration before its first block
		}
		report.Results = append(report.Results, benchResult(s, per[s], before, after))
	}
	report.Ratio = report.Results[0].PodsPerSec / report.Results[len(report.Results)-1].PodsPerSec
	return nil
}

// benchRun is what the measured blocks of one bench process share.
type benchRun struct {
	spec     BenchSpec
	kube     kubernetes.Interface
	sched    *schedulerrun.Scheduler
	cp       *controlplane.ControlPlane
	beats    <-chan error // the heartbeat's end: an error, while batches run
	began    time.Time
	def      string
	mixed    bool
	per      map[string]*batchTotals // every measured batch, per profile
	n        int                     // batches run, for their names
	progress io.Writer
}

// held is the scheduler when batches arrive queued (it runs held between
// them), nil when they arrive in bursts.
func (b *benchRun) held() *schedulerrun.Scheduler {
	if b.spec.Arrival == ArrivalBurst {
		return nil
	}
	return b.sched
}

// block runs round r's four batches of profile p against the default
// profile, A B B A or B A A B as the round's order says, and returns the
// round's ratio.
func (b *benchRun) block(ctx context.Context, r int, p string) (BenchRound, error) {
	defaultFirst := b.spec.DefaultFirst != (r%2 == 1)
	order, name := []string{p, b.def, b.def, p}, "ABBA"
	if defaultFirst {
		order, name = []string{b.def, p, p, b.def}, "BAAB"
	}
	round := map[string]*batchTotals{}
	for _, s := range order {
		select {
		case err := <-b.beats:
			return BenchRound{}, fmt.Errorf("renewing NodeResourceTopology heartbeats: %w", err)
		default:
		}
		if err := quiesce(ctx, b.sched, b.cp); err != nil {
			return BenchRound{}, fmt.Errorf("round %d, before %s: %v", r+1, s, err)
		}
		prof := ""
		if b.spec.ProfileDir != "" {
			prof = filepath.Join(b.spec.ProfileDir, fmt.Sprintf("%s-b%d.pprof", s, b.n))
		}
		bt, err := runBatch(ctx, b.kube, b.held(), s, fmt.Sprintf("b%d", b.n), b.spec.Pods, b.mixed, prof)
		b.n++
		if err != nil {
			return BenchRound{}, fmt.Errorf("round %d, %s: %v", r+1, s, err)
		}
		if b.progress != nil {
			fmt.Fprintf(b.progress, "  round %d %-26s %6.0f pods/s %6.2f CPU-ms/pod (GC %5.2f, %d cycles, %4.0f KB allocated a pod)  (at %s)\n", r+1, s, float64(b.spec.Pods)/bt.elapsed.Seconds(), ms(bt.cpu)/float64(b.spec.Pods),
				ms(bt.runtime.gcCPU)/float64(b.spec.Pods), bt.runtime.cycles, float64(bt.runtime.alloc)/1024/float64(b.spec.Pods), time.Since(b.began).Round(time.Second))
		}
		for _, t := range []map[string]*batchTotals{b.per, round} {
			if t[s] == nil {
				t[s] = &batchTotals{}
			}
			t[s].elapsed += bt.elapsed
			t[s].cpu += bt.cpu
			t[s].runtime = t[s].runtime.plus(bt.runtime)
			t[s].pods += b.spec.Pods
		}
		b.per[s].latencies = append(b.per[s].latencies, bt.latencies...)
	}
	br := BenchRound{Profile: p, Order: name, PodsPerSec: round[p].rate(), DefaultPPS: round[b.def].rate()}
	br.Ratio = br.PodsPerSec / br.DefaultPPS
	br.CPURatio = round3(round[b.def].cpuPerPod().Seconds() / round[p].cpuPerPod().Seconds())
	if b.progress != nil {
		fmt.Fprintf(b.progress, "  round %d %s %s: ratio %.3f, CPU per pod ratio %.3f\n", r+1, p, name, br.Ratio, br.CPURatio)
	}
	return br, nil
}

// benchResult is one scheduler's figures over the measured batches t: its
// throughput and latencies, and, from the scheduler's own metrics between
// before and after, its attempt and extension-point latencies and attempts.
func benchResult(s string, t *batchTotals, before, after []*dto.MetricFamily) BenchResult {
	sort.Slice(t.latencies, func(a, b int) bool { return t.latencies[a] < t.latencies[b] })
	r := BenchResult{Scheduler: s, PodsPerSec: t.rate(), CPUMsPerPod: round2(ms(t.cpu) / float64(t.pods)),
		GCCPUMsPerPod: round2(ms(t.runtime.gcCPU) / float64(t.pods)), AllocKBPerPod: round2(float64(t.runtime.alloc) / 1024 / float64(t.pods)), GCCycles: int(t.runtime.cycles),
		LatencyP50Ms: ms(t.latencies[len(t.latencies)/2]), LatencyP99Ms: ms(t.latencies[min(len(t.latencies)-1, len(t.latencies)*99/100)]),
		ExtensionPointsP50Ms: map[string]float64{}, ExtensionPointsP99Ms: map[string]float64{}}
	attempts := histogramDelta(before, after, "scheduler_scheduling_attempt_duration_seconds", map[string]string{"profile": s, "result": "scheduled"})
	r.AttemptP50Ms, r.AttemptP99Ms = round2(1000*attempts.quantile(0.5)), round2(1000*attempts.quantile(0.99))
	for _, point := range []string{"PreFilter", "Filter", "PreScore", "Score", "Reserve", "Permit", "PreBind", "Bind"} {
		h := histogramDelta(before, after, "scheduler_framework_extension_point_duration_seconds", map[string]string{"profile": s, "extension_point": point, "status": "Success"})
		if h.count > 0 {
			r.ExtensionPointsP50Ms[point] = round2(1000 * h.quantile(0.5))
			r.ExtensionPointsP99Ms[point] = round2(1000 * h.quantile(0.99))
		}
	}
	r.Attempts = map[string]int{}
	for _, result := range []string{"scheduled", "unschedulable", "error"} {
		if n := counterDelta(before, after, "scheduler_schedule_attempts_total", map[string]string{"profile": s, "result": result}); n > 0 {
			r.Attempts[result] = int(n)
		}
	}
	r.Batching = map[string]int{}
	for _, result := range []string{"hint_used", "hint_not_used", "no_hint"} {
		if n := counterDelta(before, after, "scheduler_batch_attempts_total", map[string]string{"profile": s, "result": result}); n > 0 {
			r.Batching[result] = int(n)
		}
	}
	filters := map[string]string{"plugin": nicaffinity.Name, "extension_point": "Filter", "profile": s}
	if series(after, "scheduler_plugin_evaluation_total", filters) != nil {
		perPod := round2(counterDelta(before, after, "scheduler_plugin_evaluation_total", filters) / float64(max(1, t.pods)))
		r.NICAffinityFiltersPerPod = &perPod
	}
	for _, reason := range batchFlushReasons {
		if n := counterDelta(before, after, "scheduler_batch_cache_flushed_total", map[string]string{"profile": s, "reason": reason}); n > 0 {
			r.Batching["flushed: "+reason] = int(n)
		}
	}
	return r
}

// batchFlushReasons are the reasons the scheduler's opportunistic batching
// gives for dropping what it kept from the last pod (the reason label of
// scheduler_batch_cache_flushed_total).
var batchFlushReasons = []string{"pod_failed", "pod_skipped", "pod_nominated", "node_missing", "empty_list", "expired",
	"pod_incompatible", "pod_not_batchable", "filter_error", "prescore_error", "rescore_error", "normalize_error"}

// benchConfig is the configuration under test plus the default profile,
// with the client's rate limit lifted as scheduler_perf does, so that the
// measurement is the scheduler's work, not 50 requests a second.
func benchConfig(custom string, under []string) (string, error) {
	cfg := custom
	if cfg == "" {
		var err error
		if cfg, err = schedulerrun.ShippedConfig(); err != nil {
			return "", err
		}
	}
	return schedulerrun.Edit(cfg, func(doc map[string]any) error {
		profiles, _ := doc["profiles"].([]any)
		has := func(name string) bool {
			for _, p := range profiles {
				if m, ok := p.(map[string]any); ok && m["schedulerName"] == name {
					return true
				}
			}
			return false
		}
		if slices.Contains(under, NoiseProfile) && !has(NoiseProfile) {
			profiles = append(profiles, map[string]any{"schedulerName": NoiseProfile})
		}
		for _, want := range under {
			if !has(want) {
				return fmt.Errorf("scheduler configuration: no profile named %s", want)
			}
		}
		doc["profiles"] = append(profiles, map[string]any{"schedulerName": sim.Schedulers[1]})
		doc["clientConnection"] = map[string]any{"qps": 5000, "burst": 5000}
		return nil
	})
}

type batchTotals struct {
	elapsed   time.Duration
	cpu       time.Duration
	runtime   runtimeStats
	pods      int
	latencies []time.Duration
}

func (t *batchTotals) rate() float64 { return float64(t.pods) / t.elapsed.Seconds() }

func (t *batchTotals) cpuPerPod() time.Duration { return t.cpu / time.Duration(max(1, t.pods)) }

type batch struct {
	elapsed time.Duration
	// cpu is the process's CPU time (user and system) over elapsed.
	cpu time.Duration
	// runtime is the Go runtime's garbage collection and allocation over
	// elapsed.
	runtime   runtimeStats
	latencies []time.Duration
}

// runtimeStats is what the Go runtime's metrics say of the garbage
// collector: its CPU time (the runtime's estimate, which charges the
// dedicated mark workers whole cores), its cycles and the bytes allocated.
// Every component shares one heap, so a cycle marks the apiserver's watch
// caches as well as the scheduler's: a batch's share of that work depends
// on how many cycles fall in it, which is why it is reported beside the
// CPU time.
type runtimeStats struct {
	gcCPU  time.Duration
	cycles uint64
	alloc  uint64
}

var runtimeSamples = []string{"/cpu/classes/gc/total:cpu-seconds", "/gc/cycles/total:gc-cycles", "/gc/heap/allocs:bytes"}

func readRuntime() runtimeStats {
	s := make([]metrics.Sample, len(runtimeSamples))
	for i, n := range runtimeSamples {
		s[i].Name = n
	}
	metrics.Read(s)
	get := func(i int) uint64 {
		if s[i].Value.Kind() == metrics.KindUint64 {
			return s[i].Value.Uint64()
		}
		return 0
	}
	r := runtimeStats{cycles: get(1), alloc: get(2)}
	if s[0].Value.Kind() == metrics.KindFloat64 {
		r.gcCPU = time.Duration(s[0].Value.Float64() * float64(time.Second))
	}
	return r
}

func (r runtimeStats) since(before runtimeStats) runtimeStats {
	return runtimeStats{gcCPU: r.gcCPU - before.gcCPU, cycles: r.cycles - before.cycles, alloc: r.alloc - before.alloc}
}

func (r runtimeStats) plus(o runtimeStats) runtimeStats {
	return runtimeStats{gcCPU: r.gcCPU + o.gcCPU, cycles: r.cycles + o.cycles, alloc: r.alloc + o.alloc}
}

// processCPU is the CPU time the process has used so far, user and system:
// the apiserver, etcd and the scheduler all run in it.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// benchVFResource is the SR-IOV resource of the mixed workload's VF pods.
const benchVFResource = "openshift.io/sriov_highnet"

// benchNode is one machine's Node capacity and NodeResourceTopology input,
// built once and shared by every node of that machine.
type benchNode struct {
	topo    *topology.Topology
	offered []devices.Device
	res     corev1.ResourceList
}

func newBenchNode(dir string, build func(*machines.Tree)) (benchNode, error) {
	topo, err := machines.Discover(dir, build)
	if err != nil {
		return benchNode{}, err
	}
	var offered []devices.Device
	for _, g := range topo.GPUs {
		offered = append(offered, devices.Device{Resource: "nvidia.com/gpu", ID: g.PCI.Address})
	}
	vfs := 0
	for _, n := range topo.NICs {
		for _, vf := range n.VFs {
			offered = append(offered, devices.Device{Resource: benchVFResource, ID: vf})
			vfs++
		}
	}
	res := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("192"), corev1.ResourceMemory: resource.MustParse("2Ti"),
		corev1.ResourcePods: resource.MustParse("110"), "nvidia.com/gpu": *resource.NewQuantity(int64(len(topo.GPUs)), resource.DecimalSI),
		"rdma/hca": resource.MustParse("100")}
	if vfs > 0 {
		res[benchVFResource] = *resource.NewQuantity(int64(vfs), resource.DecimalSI)
	}
	return benchNode{topo: topo, offered: offered, res: res}, nil
}

// populate creates n nodes: HGX H100, and with mixed every fourth an H20
// with VFs, each with rails from PCI rank.
func populate(ctx context.Context, cp *controlplane.ControlPlane, n int, mixed bool, dir string, progress io.Writer) ([]*v1alpha2.NodeResourceTopology, error) {
	h100, err := newBenchNode(filepath.Join(dir, "hgx-h100"), machines.HGXH100)
	if err != nil {
		return nil, err
	}
	kinds := []benchNode{h100}
	if mixed {
		h20, err := newBenchNode(filepath.Join(dir, "h20-sriov"), machines.H20SRIOV)
		if err != nil {
			return nil, err
		}
		kinds = append(kinds, h100, h100, h20)
	}
	objs := make([]*v1alpha2.NodeResourceTopology, n)
	sem := make(chan struct{}, 16)
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := 0; i < n; i++ {
		wg.Add(1)
		sem <- struct{}{}
		go func(i int) {
			defer wg.Done()
			defer func() { <-sem }()
			name := fmt.Sprintf("gpu-%05d", i)
			k := kinds[i%len(kinds)]
			in := nrt.Input{Node: name, Topology: k.topo, Snapshot: devices.Snapshot{Allocatable: k.offered}, Resources: nrt.DefaultResources()}
			if mixed {
				in.Rails = nrt.Rails{Source: nrt.RailFromPCIRank}
			}
			obj, _ := nrt.Build(in)
			obj.Attributes = append(obj.Attributes, v1alpha2.AttributeInfo{Name: nrt.AttrHeartbeat, Value: time.Now().UTC().Format(time.RFC3339)})
			created, err := cp.NRT.TopologyV1alpha2().NodeResourceTopologies().Create(ctx, obj, metav1.CreateOptions{})
			if err != nil {
				errs <- err
				return
			}
			objs[i] = created
			node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"kubernetes.io/hostname": name}},
				Status: corev1.NodeStatus{Capacity: k.res, Allocatable: k.res, Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}}}
			if _, err := cp.Kube.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{}); err != nil {
				errs <- err
			}
		}(i)
		if progress != nil && (i+1)%500 == 0 {
			fmt.Fprintf(progress, "  %d/%d nodes\n", i+1, n)
		}
	}
	wg.Wait()
	close(errs)
	return objs, <-errs
}

// heartbeat renews every node's NodeResourceTopology once a period, spread
// evenly over it, as each node's exporter renews its heartbeat at every
// resync: the plugin's topologyMaxAge (5 minutes) would otherwise expire
// every node of a run that lasts longer, and the informers' work on these
// writes is part of what a real cluster's scheduler does. An update, where
// the exporter applies: the bench owns the objects. It returns when ctx
// ends, or with the first failed write.
func heartbeat(ctx context.Context, cp *controlplane.ControlPlane, objs []*v1alpha2.NodeResourceTopology, period time.Duration) error {
	if len(objs) == 0 {
		return nil
	}
	tick := time.NewTicker(max(time.Millisecond, period/time.Duration(len(objs))))
	defer tick.Stop()
	for i := 0; ; i = (i + 1) % len(objs) {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
		obj := objs[i].DeepCopy()
		for a := range obj.Attributes {
			if obj.Attributes[a].Name == nrt.AttrHeartbeat {
				obj.Attributes[a].Value = time.Now().UTC().Format(time.RFC3339)
			}
		}
		updated, err := cp.NRT.TopologyV1alpha2().NodeResourceTopologies().Update(ctx, obj, metav1.UpdateOptions{})
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("node %s: %w", obj.Name, err)
		}
		objs[i] = updated
	}
}

// benchPod is pod i of a batch for scheduler: a one-GPU RDMA pod, or with
// mixed, the kind WorkloadMixed gives position i.
func benchPod(scheduler, prefix string, i int, mixed bool) *corev1.Pod {
	gpu := corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("1"), "rdma/hca": resource.MustParse("1")}
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s-%05d", prefix, i), Namespace: "default"},
		Spec: corev1.PodSpec{SchedulerName: scheduler, Containers: []corev1.Container{{Name: "c", Image: "c",
			Resources: corev1.ResourceRequirements{Limits: gpu, Requests: gpu}}}}}
	if !mixed {
		return p
	}
	var limits corev1.ResourceList
	switch i % 10 {
	case 4, 5: // no GPU
		limits = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1")}
	case 6, 7: // a two-pod job on its rails: pods 6 and 7 of each tenth
		limits = corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("2"), "rdma/hca": resource.MustParse("1")}
		p.Labels = map[string]string{request.IndexedJobLabel: fmt.Sprintf("%s-job-%05d", prefix, i/10)}
	case 8, 9: // one GPU and one VF
		limits = corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("1"), benchVFResource: resource.MustParse("1")}
	default:
		return p
	}
	p.Spec.Containers[0].Resources = corev1.ResourceRequirements{Limits: limits, Requests: limits}
	return p
}

const benchCreators = 16

// runBatch creates pods pods for scheduler (benchPod) and measures until all are bound.
func runBatch(ctx context.Context, kube kubernetes.Interface, held *schedulerrun.Scheduler, scheduler, prefix string, pods int, mixed bool, profile string) (batch, error) {
	var b batch
	pc := kube.CoreV1().Pods("default")
	selector := fields.OneTermEqualSelector("spec.schedulerName", scheduler).String()
	w, err := pc.Watch(ctx, metav1.ListOptions{FieldSelector: selector})
	if err != nil {
		return b, err
	}
	defer func() { w.Stop() }()
	start, cpuStart, rtStart := time.Now(), processCPU(), readRuntime()
	created, createdAt := createBatch(ctx, pc, scheduler, prefix, pods, mixed)
	if held != nil {
		<-created
		if err := waitQueued(ctx, held, pods); err != nil {
			return b, err
		}
		start, cpuStart, rtStart = time.Now(), processCPU(), readRuntime()
		if err := held.Release(); err != nil {
			return b, err
		}
	}
	stopProfile, err := StartCPUProfile(profile)
	if err != nil {
		return b, err
	}
	defer stopProfile() // on errors; the timed part's end stops it first
	bound := map[string]bool{}
	lastBound := time.Now()
	see := func(p *corev1.Pod) {
		if p.Spec.NodeName == "" || bound[p.Name] {
			return
		}
		bound[p.Name] = true
		lastBound = time.Now()
		from := start // queued: every pod waited for the release
		if held == nil {
			from = createdAt(p.Name)
		}
		b.latencies = append(b.latencies, time.Since(from))
	}
	// A batch fails when no pod has bound for stallAfter (the first binds
	// come within a second at 5000 nodes), naming a pod still unbound and
	// why, so a stuck run ends with its cause rather than at a wall-clock
	// limit.
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	rewatches := 0
	for len(bound) < pods {
		if n := len(bound); n > 0 && time.Since(lastBound) > stallAfter || n == 0 && time.Since(start) > 2*stallAfter {
			return b, fmt.Errorf("no pod bound for %s: %d of %d bound; %s", stallAfter, n, pods, unboundSample(ctx, pc, selector))
		}
		select {
		case <-tick.C:
			continue
		case ev, ok := <-w.ResultChan():
			if !ok {
				// The apiserver closes watchers that fall behind a burst;
				// catch up from a list and watch on from there.
				if rewatches++; rewatches > 10 {
					return b, fmt.Errorf("watch closed %d times; %d of %d pods bound", rewatches, len(bound), pods)
				}
				l, err := pc.List(ctx, metav1.ListOptions{FieldSelector: selector})
				if err != nil {
					return b, err
				}
				for i := range l.Items {
					see(&l.Items[i])
				}
				if w, err = pc.Watch(ctx, metav1.ListOptions{FieldSelector: selector, ResourceVersion: l.ResourceVersion}); err != nil {
					return b, err
				}
				continue
			}
			if p, isPod := ev.Object.(*corev1.Pod); isPod && ev.Type != watch.Deleted {
				see(p)
			}
		}
	}
	b.elapsed, b.cpu, b.runtime = time.Since(start), processCPU()-cpuStart, readRuntime().since(rtStart)
	stopProfile()
	if held != nil {
		if err := held.Hold(); err != nil {
			return b, err
		}
	}
	// Clear the batch so every batch sees the same cluster.
	if err := pc.DeleteCollection(ctx, metav1.DeleteOptions{GracePeriodSeconds: new(int64)}, metav1.ListOptions{FieldSelector: selector}); err != nil {
		return b, err
	}
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		l, err := pc.List(ctx, metav1.ListOptions{})
		return err == nil && len(l.Items) == 0, nil
	})
	return b, err
}

// StartCPUProfile starts a CPU profile of the process into path ("":
// none); stop ends it and may be called more than once.
func StartCPUProfile(path string) (stop func(), err error) {
	if path == "" {
		return func() {}, nil
	}
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("CPU profile into %s: %w", path, err)
	}
	var once sync.Once
	return func() { once.Do(func() { pprof.StopCPUProfile(); f.Close() }) }, nil
}

// createBatch creates the batch's pods from several clients at once, as
// scheduler_perf does, so that the scheduler, not one client's round
// trips, sets the pace. done is closed once every creation has returned;
// createdAt is when a pod's creation was sent.
func createBatch(ctx context.Context, pc corev1client.PodInterface, scheduler, prefix string, pods int, mixed bool) (done <-chan struct{}, createdAt func(name string) time.Time) {
	created := make(map[string]time.Time, pods)
	var mu sync.Mutex
	next := make(chan int, pods)
	for i := 0; i < pods; i++ {
		next <- i
	}
	close(next)
	var creators sync.WaitGroup
	creators.Add(benchCreators)
	for w := 0; w < benchCreators; w++ {
		go func() {
			defer creators.Done()
			for i := range next {
				p := benchPod(scheduler, prefix, i, mixed)
				mu.Lock()
				created[p.Name] = time.Now()
				mu.Unlock()
				_, _ = pc.Create(ctx, p, metav1.CreateOptions{})
			}
		}()
	}
	finished := make(chan struct{})
	go func() { creators.Wait(); close(finished) }()
	return finished, func(name string) time.Time {
		mu.Lock()
		defer mu.Unlock()
		return created[name]
	}
}

// waitQueued waits until the held scheduler has received all the
// batch's pods: the release then finds all of them there.
func waitQueued(ctx context.Context, held *schedulerrun.Scheduler, pods int) error {
	n := 0
	err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, stallAfter, true, func(context.Context) (bool, error) {
		var err error
		n, err = held.ReceivedPods()
		return n >= pods, err
	})
	if err != nil {
		return fmt.Errorf("the held scheduler has received %d of the batch's %d pods after %s (were some not created?): %w", n, pods, stallAfter, err)
	}
	return nil
}

// stallAfter is how long a batch may go without a pod binding.
const stallAfter = 30 * time.Second

// unboundSample names one pod of the batch that has no node, with its
// PodScheduled condition: why a stalled batch stalled.
func unboundSample(ctx context.Context, pc corev1client.PodInterface, selector string) string {
	l, err := pc.List(ctx, metav1.ListOptions{FieldSelector: selector})
	if err != nil {
		return "listing pods: " + err.Error()
	}
	for _, p := range l.Items {
		if p.Spec.NodeName != "" {
			continue
		}
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodScheduled {
				return fmt.Sprintf("pod %s: PodScheduled=%s %s: %s", p.Name, c.Status, c.Reason, c.Message)
			}
		}
		return fmt.Sprintf("pod %s: not tried yet", p.Name)
	}
	return "every pod listed has a node (the watch missed them)"
}

// quiesce waits until the scheduler's cache holds no pod, so that its
// informers have handled every deletion of the batch before (the apiserver
// having none is not enough: 5000 deletions handled while the next batch
// ran were charged to whichever profile came next), then compacts etcd's
// history and collects garbage, so that every batch starts on the same
// storage and heap: without the compaction, the revisions of every batch
// before piled up until the apiserver's own compaction (every five
// minutes), and throughput fell from batch to batch in between.
func quiesce(ctx context.Context, s *schedulerrun.Scheduler, cp *controlplane.ControlPlane) error {
	if err := wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		n, err := s.Sched.Cache.PodCount()
		return err == nil && n == 0, nil
	}); err != nil {
		return fmt.Errorf("the scheduler's cache still holds pods of the last batch: %w", err)
	}
	if err := cp.CompactStorage(ctx); err != nil {
		return err
	}
	runtime.GC()
	return nil
}

// histogram is the buckets of one Prometheus histogram series.
type histogram struct {
	bounds []float64
	counts []float64 // cumulative
	count  float64
}

// series finds the metric of a family that carries labels.
func series(fams []*dto.MetricFamily, name string, labels map[string]string) *dto.Metric {
	for _, f := range fams {
		if f.GetName() != name {
			continue
		}
	metrics:
		for _, m := range f.GetMetric() {
			have := map[string]string{}
			for _, l := range m.GetLabel() {
				have[l.GetName()] = l.GetValue()
			}
			for k, v := range labels {
				if have[k] != v {
					continue metrics
				}
			}
			return m
		}
	}
	return nil
}

// counterDelta is what a counter series gained between two gatherings.
func counterDelta(before, after []*dto.MetricFamily, name string, labels map[string]string) float64 {
	a, b := series(after, name, labels), series(before, name, labels)
	if a == nil {
		return 0
	}
	if b == nil {
		return a.GetCounter().GetValue()
	}
	return a.GetCounter().GetValue() - b.GetCounter().GetValue()
}

// histogramDelta is what a histogram series (picked by labels) gained
// between two gatherings.
func histogramDelta(before, after []*dto.MetricFamily, name string, labels map[string]string) histogram {
	find := func(fams []*dto.MetricFamily) *dto.Histogram {
		if m := series(fams, name, labels); m != nil {
			return m.GetHistogram()
		}
		return nil
	}
	var h histogram
	a, b := find(after), find(before)
	if a == nil {
		return h
	}
	h.count = float64(a.GetSampleCount())
	if b != nil {
		h.count -= float64(b.GetSampleCount())
	}
	for i, bk := range a.GetBucket() {
		h.bounds = append(h.bounds, bk.GetUpperBound())
		c := float64(bk.GetCumulativeCount())
		if b != nil && i < len(b.GetBucket()) {
			c -= float64(b.GetBucket()[i].GetCumulativeCount())
		}
		h.counts = append(h.counts, c)
	}
	return h
}

// quantile interpolates linearly inside the bucket that holds it, as
// PromQL's histogram_quantile does; past the last bound it answers that bound.
func (h histogram) quantile(q float64) float64 {
	if h.count == 0 {
		return 0
	}
	rank := q * h.count
	lower, below := 0.0, 0.0
	for i, upper := range h.bounds {
		if h.counts[i] >= rank {
			in := h.counts[i] - below
			if in <= 0 {
				return upper
			}
			return lower + (upper-lower)*(rank-below)/in
		}
		lower, below = upper, h.counts[i]
	}
	return lower
}

// round2 keeps figures readable and JSON equal to the table.
func round2(f float64) float64 { return math.Round(f*100) / 100 }

func round3(f float64) float64 { return math.Round(f*1000) / 1000 }
