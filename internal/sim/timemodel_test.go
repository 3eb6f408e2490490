package sim

import (
	"bytes"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/nicaffinity/nicaffinity/internal/kubeletsim"
	"github.com/nicaffinity/nicaffinity/pkg/machines"
	"github.com/nicaffinity/nicaffinity/pkg/topology"
)

// TestTimeModelByHand: on a node whose GPU 0 has a NIC at PIX and GPUs 1
// and 2 only one at PHB, with the default model (30% communication, half
// the bandwidth without GPUDirect RDMA):
//   - A, RDMA on GPU 0, aligned runtime 1 h: runs 1 h;
//   - B, RDMA on GPUs 1-2, aligned runtime 2 h: 2 h x (0.7 + 0.3/0.5) =
//     2.6 h, and loses 2 GPUs x 0.6 h = 1.2 GPU-hours;
//   - C, no RDMA, on the PHB GPU, aligned runtime 1 h: runs 1 h.
func TestTimeModelByHand(t *testing.T) {
	n := nodeInfo{Name: "n", GPUs: []string{"0000:01:00.0", "0000:02:00.0", "0000:03:00.0"}, Aligned: bools(1, 0, 0), Alignable: 1,
		Best: []topology.Level{topology.LevelPIX, topology.LevelPHB, topology.LevelPHB}}
	h := func(v float64) time.Duration { return time.Duration(v * float64(time.Hour)) }
	on := func(gpus ...int) []podRecord {
		return []podRecord{{Node: "n", Got: gpus, assignment: kubeletsim.Assignment{GPUs: gpus}}}
	}
	a := &record{job: job{Name: "a", GPUs: 1, RDMA: true, Duration: h(1)}, Bound: 0, Running: 0, Pods: on(0)}
	b := &record{job: job{Name: "b", GPUs: 2, RDMA: true, Duration: h(2), At: h(0.5)}, Bound: h(1), Running: h(1), Pods: on(1, 2)}
	c := &record{job: job{Name: "c", GPUs: 1, Duration: h(1)}, Bound: 0, Running: 0, Pods: on(2)}
	nodes := map[string]nodeInfo{"n": n}
	for _, r := range []*record{a, b, c} {
		r.Pods[0].Bound, r.Pods[0].Running = r.Bound, r.Running
		r.started(DefaultTimeModel, nodes)
	}
	for _, tc := range []struct {
		r     *record
		worst topology.Level
		run   time.Duration
	}{{a, topology.LevelPIX, h(1)}, {b, topology.LevelPHB, h(2.6)}, {c, topology.LevelPHB, h(1)}} {
		if tc.r.Worst != tc.worst || tc.r.Runtime != tc.run {
			t.Errorf("%s: worst %v, runtime %v; want %v, %v", tc.r.Name, tc.r.Worst, tc.r.Runtime, tc.worst, tc.run)
		}
		tc.r.Ended = tc.r.Running + tc.r.Runtime
	}
	got := summarize("s", []*record{a, b, c}, []nodeInfo{n}, h(3.6))
	// JCT: A 1 h, B 3.1 h (0.5 h waiting), C 1 h. Makespan 0 to 3.6 h.
	want := Result{Finished: 3, RDMAJobs: 2, JCTMeanHours: 1.7, JCTP50Hours: 1, JCTP99Hours: 3.1, MakespanHours: 3.6, GPUHoursLost: 1.2}
	pick := func(r Result) Result {
		return Result{Finished: r.Finished, RDMAJobs: r.RDMAJobs, JCTMeanHours: r.JCTMeanHours, JCTP50Hours: r.JCTP50Hours, JCTP99Hours: r.JCTP99Hours,
			MakespanHours: r.MakespanHours, GPUHoursLost: r.GPUHoursLost, BindP50Ms: r.BindP50Ms, BindP99Ms: r.BindP99Ms, RunningP50Ms: r.RunningP50Ms, RunningP99Ms: r.RunningP99Ms}
	}
	if diff := cmp.Diff(want, pick(got)); diff != "" {
		t.Errorf("(-want,+got):\n%s", diff)
	}

	// A VF job's GPUs are measured to the VF's own NIC, not the nearest.
	n.VFLevels = map[string][]topology.Level{"0000:05:00.2": {topology.LevelSYS, topology.LevelPIX, topology.LevelPIX}}
	if w := n.worst(kubeletsim.Assignment{GPUs: []int{0}, VFs: []string{"0000:05:00.2"}}); w != topology.LevelSYS {
		t.Errorf("VF job on GPU 0: worst %v, want SYS", w)
	}
	if w := n.worst(kubeletsim.Assignment{GPUs: []int{1, 2}, VFs: []string{"0000:05:00.2"}}); w != topology.LevelPIX {
		t.Errorf("VF job on GPUs 1-2: worst %v, want PIX", w)
	}
	// A DRA job's GPUs are measured to the NICs it claimed: GPU 0's PIX
	// NIC is not among them.
	n.NICLevels = map[string][]topology.Level{"mlx5_0": {topology.LevelPIX, topology.LevelSYS, topology.LevelSYS}, "mlx5_1": {topology.LevelSYS, topology.LevelPXB, topology.LevelPHB}}
	if w := n.worst(kubeletsim.Assignment{GPUs: []int{0, 1}, NICs: []string{"mlx5_1"}}); w != topology.LevelSYS {
		t.Errorf("DRA job on GPUs 0-1 with mlx5_1: worst %v, want SYS", w)
	}
	if w := n.worst(kubeletsim.Assignment{GPUs: []int{0, 1}, NICs: []string{"mlx5_0", "mlx5_1"}}); w != topology.LevelPXB {
		t.Errorf("DRA job on GPUs 0-1 with both NICs: worst %v, want PXB", w)
	}
}

func TestRuntimeBands(t *testing.T) {
	m := TimeModel{CommShare: map[int]float64{4: 0.5}, Bandwidth: map[string]float64{"PIX": 1, "PXB": 0.8, "PHB": 0.25, "NODE": 0.2, "SYS": 0.1}}
	for _, tc := range []struct {
		level topology.Level
		rdma  bool
		want  time.Duration
	}{
		{topology.LevelPIX, true, 100 * time.Minute},
		{topology.LevelPXB, true, 112*time.Minute + 30*time.Second}, // 50 + 50/0.8
		{topology.LevelPHB, true, 250 * time.Minute},
		{topology.LevelSYS, true, 550 * time.Minute},
		{topology.LevelSYS, false, 100 * time.Minute},
	} {
		if got := m.Runtime(100*time.Minute, 4, tc.rdma, tc.level); got != tc.want {
			t.Errorf("%v rdma=%v: %v, want %v", tc.level, tc.rdma, got, tc.want)
		}
	}
}

// TestRunsMedianAndRange: the summary over runs of known results is their
// median (of an even count, the mean of the middle two) and range, the
// change against the default scheduler is paired by run, and the table
// prints both.
func TestRunsMedianAndRange(t *testing.T) {
	rep := &Report{Workload: WorkloadSpec{Jobs: 10, Arrival: ArrivalBacklog}, Columns: []Column{columnNamed("required+proxy"), columnNamed("default-scheduler")}}
	// Makespans per run: required+proxy 3, 1, 2, 8; default 4, 2, 2, 8.
	for i, m := range [][2]float64{{3, 4}, {1, 2}, {2, 2}, {8, 8}} {
		rep.Add(&Plan{Workload: WorkloadSpec{Seed: int64(i + 1)}, bound: Bound{Jobs: 5 + i}}, []Result{
			{Jobs: 10, Finished: 10, MakespanHours: m[0], GPUHoursLost: float64(i)},
			{Jobs: 10, Finished: 10 - i%2, MakespanHours: m[1], GPUHoursLost: 0},
		})
	}
	rep.Finish()
	// Sorted 1, 2, 3, 8: median 2.5. Changes: -25%, -50%, 0%, 0%:
	// median -12.5%. Bounds 5..8: 6.5.
	for _, tc := range []struct {
		col  int
		key  string
		want Stat
		ok   bool
	}{
		{0, "makespanHours", Stat{Median: 2.5, Min: 1, Max: 8, Runs: 4}, true},
		{1, "makespanHours", Stat{Median: 3, Min: 2, Max: 8, Runs: 4}, true},
		{0, "makespanVsDefault", Stat{Median: -12.5, Min: -50, Max: 0, Runs: 4}, true},
		{1, "makespanVsDefault", Stat{}, false},     // the default against itself
		{0, "gpuHoursLostVsDefault", Stat{}, false}, // against zero: no figure
		{1, "givenUp", Stat{Median: 0.5, Min: 0, Max: 1, Runs: 4}, true},
		{0, "bound", Stat{Median: 6.5, Min: 5, Max: 8, Runs: 4}, true},
	} {
		got, ok := rep.Summary[tc.col].Figures[tc.key]
		if ok != tc.ok || got != tc.want {
			t.Errorf("%s %s: %+v %v, want %+v %v", rep.Columns[tc.col].Name, tc.key, got, ok, tc.want, tc.ok)
		}
	}
	var b bytes.Buffer
	rep.Format(&b)
	for _, want := range []string{"Each cell: the median of 4 runs (seeds 1-4) [lowest, highest].", "2.50 [1.00, 8.00]", "-12.5% [-50.0%, +0.0%]"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, b.String())
		}
	}
	// A backlog: makespan decides. required+proxy gave up nothing and
	// its makespan is never longer, run by run.
	want := "required+proxy finishes the same work 12.5% sooner than default-scheduler [-50.0%, +0.0% over the runs] (makespan 2.50 h against 3.00 h)"
	if !strings.HasPrefix(rep.Verdict, want) || !strings.Contains(rep.Verdict, "medians of 4 runs") || !strings.Contains(rep.Verdict, "default-scheduler 0.5") ||
		!strings.Contains(rep.Verdict, "Decided by makespan: every job waits from the start") {
		t.Errorf("verdict %q, want it to start %q", rep.Verdict, want)
	}
	// Arriving over time, mean JCT decides: all zero here, so no change
	// exists and the verdict names the best without a comparison.
	rep.Workload.Arrival = ""
	rep.Finish()
	if !strings.HasPrefix(rep.Verdict, "required+proxy did best on mean job completion time") || !strings.Contains(rep.Verdict, "Decided by mean job completion time: the jobs arrive over time") {
		t.Errorf("arrival-paced verdict %q", rep.Verdict)
	}
	checkTableAgreesWithJSON(t, rep)
}

func TestStatOf(t *testing.T) {
	for _, tc := range []struct {
		in   []float64
		want Stat
		ok   bool
	}{
		{[]float64{5}, Stat{Median: 5, Min: 5, Max: 5, Runs: 1}, true},
		{[]float64{3, 1, 2}, Stat{Median: 2, Min: 1, Max: 3, Runs: 3}, true},
		{[]float64{4, 1, 3, 2}, Stat{Median: 2.5, Min: 1, Max: 4, Runs: 4}, true},
		{[]float64{math.NaN(), 7, 1}, Stat{Median: 4, Min: 1, Max: 7, Runs: 2}, true},
		{[]float64{math.NaN()}, Stat{}, false},
		{nil, Stat{}, false},
	} {
		got, ok := statOf(tc.in)
		if ok != tc.ok || got != tc.want {
			t.Errorf("statOf(%v) = %+v %v, want %+v %v", tc.in, got, ok, tc.want, tc.ok)
		}
	}
}

// TestVerdictNoClearWinner: a change against the default scheduler that
// takes both signs over the runs is reported as no difference.
func TestVerdictNoClearWinner(t *testing.T) {
	rep := &Report{Workload: WorkloadSpec{Jobs: 1, Arrival: ArrivalBacklog}, Columns: []Column{columnNamed("preferred+proxy"), columnNamed("default-scheduler")}}
	for i, m := range [][2]float64{{5, 5.2}, {6, 5.9}, {5.5, 5.6}} {
		rep.Add(&Plan{Workload: WorkloadSpec{Seed: int64(i)}}, []Result{{Jobs: 1, Finished: 1, MakespanHours: m[0]}, {Jobs: 1, Finished: 1, MakespanHours: m[1]}})
	}
	rep.Finish()
	// Changes -3.8%, +1.7%, -1.8%.
	want := "No clear difference: preferred+proxy's makespan is 1.8% shorter than default-scheduler's at the median, but shorter in some runs and longer in others [-3.8%, +1.7% over the runs]"
	if !strings.HasPrefix(rep.Verdict, want) || strings.Contains(rep.Verdict, "finishes the same work") {
		t.Errorf("verdict %q", rep.Verdict)
	}
	// Later in every run: the verdict says no column is sooner.
	rep = &Report{Workload: WorkloadSpec{Jobs: 1, Arrival: ArrivalBacklog}, Columns: []Column{columnNamed("preferred+proxy"), columnNamed("default-scheduler")}}
	for i, m := range [][2]float64{{5.5, 5.2}, {6, 5.9}} {
		if err := rep.Add(&Plan{Workload: WorkloadSpec{Seed: int64(i)}}, []Result{{Jobs: 1, Finished: 1, MakespanHours: m[0]}, {Jobs: 1, Finished: 1, MakespanHours: m[1]}}); err != nil {
			t.Fatal(err)
		}
	}
	rep.Finish()
	if want := "No column finishes the same work sooner than default-scheduler: the best, preferred+proxy, is 3.7% later [+1.7%, +5.8% over the runs]"; !strings.HasPrefix(rep.Verdict, want) {
		t.Errorf("verdict %q, want %q", rep.Verdict, want)
	}
}

// TestDescribeAppliesNCCLRule: the time model and the bound judge a GB200
// tray by NCCL's rule: every GPU at P2C to its nearest NIC, so aligned,
// where the nvidia-smi level (SYS) would call none aligned.
func TestDescribeAppliesNCCLRule(t *testing.T) {
	topo, err := machines.Load("gb200-tray-4gpu-8nic")
	if err != nil {
		t.Fatal(err)
	}
	n := describeTest(t, "tray", topo)
	if diff := cmp.Diff([]bool{true, true, true, true}, n.Aligned); diff != "" {
		t.Errorf("aligned GPUs (-want,+got):\n%s", diff)
	}
	want := []topology.Level{topology.LevelP2C, topology.LevelP2C, topology.LevelP2C, topology.LevelP2C}
	if diff := cmp.Diff(want, n.Best); diff != "" {
		t.Errorf("best levels (-want,+got):\n%s", diff)
	}
	if got := DefaultTimeModel.Runtime(time.Hour, 1, true, topology.LevelP2C); got != time.Hour {
		t.Errorf("runtime at P2C %v, want the aligned hour", got)
	}
}
