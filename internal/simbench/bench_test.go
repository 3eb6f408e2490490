package simbench

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/nicaffinity/nicaffinity/internal/controlplane"
	"github.com/nicaffinity/nicaffinity/internal/schedulerrun"
	"github.com/nicaffinity/nicaffinity/pkg/request"
)

// TestBench runs the A B B A measurement on a small cluster: both profiles
// bind every pod and report a throughput.
func TestBench(t *testing.T) {
	profiles := t.TempDir()
	report, err := Bench(context.Background(), BenchSpec{Nodes: 20, Pods: 60, Rounds: 2, ProfileDir: profiles}, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range report.Results {
		if r.AllocKBPerPod <= 0 {
			t.Errorf("%s: %.0f KB allocated a pod: want the batches' allocation reported", r.Scheduler, r.AllocKBPerPod)
		}
	}
	// One CPU profile per measured batch, named by its profile.
	files, err := filepath.Glob(filepath.Join(profiles, "*.pprof"))
	if err != nil {
		t.Fatal(err)
	}
	perProfile := map[string]int{}
	for _, f := range files {
		if st, err := os.Stat(f); err != nil || st.Size() == 0 {
			t.Errorf("%s: empty (%v)", f, err)
		}
		perProfile[strings.SplitN(filepath.Base(f), "-b", 2)[0]]++
	}
	if diff := cmp.Diff(map[string]int{"nicaffinity-scheduler": 4, "default-scheduler": 4}, perProfile); diff != "" {
		t.Errorf("batch profiles per profile (-want,+got):\n%s", diff)
	}
	results, ratio := report.Results, report.Ratio
	if len(report.Rounds) != 2 || report.Rounds[0].Order != "ABBA" || report.Rounds[1].Order != "BAAB" || report.Rounds[1].Ratio <= 0 {
		t.Errorf("rounds: %+v, want ABBA then BAAB with a ratio each", report.Rounds)
	}
	for _, r := range results {
		if r.PodsPerSec <= 0 || r.LatencyP99Ms < r.LatencyP50Ms {
			t.Errorf("%+v", r)
		}
	}
	// Every node an HGX H100 with a NIC next to every GPU: the real
	// scheduler skips NICAffinity's Filter for every one-GPU RDMA pod
	// (TestBenchMixed sees it run where pods need VFs or rails).
	if f := results[0].NICAffinityFiltersPerPod; f == nil || *f != 0 {
		t.Errorf("%s: NICAffinity's Filter calls per pod %v, want 0", results[0].Scheduler, f)
	}
	if f := results[1].NICAffinityFiltersPerPod; f != nil {
		t.Errorf("%s: NICAffinity's Filter calls per pod %v, want none reported", results[1].Scheduler, *f)
	}
	t.Logf("%+v ratio %.2f", results, ratio)
	if ratio <= 0 {
		t.Errorf("ratio %v", ratio)
	}
}

// TestBenchNoiseFloor: with NoiseFloor, a profile of the default plugins
// under another name is measured against the default profile too, in
// rounds of its own, after the profile under test (whose ratio stays the
// report's).
func TestBenchNoiseFloor(t *testing.T) {
	report, err := Bench(context.Background(), BenchSpec{Nodes: 20, Pods: 40, Rounds: 1, NoiseFloor: true}, nil)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, r := range report.Rounds {
		got = append(got, r.Profile)
		if r.Ratio <= 0 {
			t.Errorf("round %+v: no ratio", r)
		}
	}
	if diff := cmp.Diff([]string{"nicaffinity-scheduler", NoiseProfile}, got); diff != "" {
		t.Errorf("rounds' profiles (-want,+got):\n%s", diff)
	}
	if n := len(report.Results); n != 3 || report.Results[0].Scheduler != "nicaffinity-scheduler" || report.Results[1].Scheduler != NoiseProfile {
		t.Errorf("results %+v: want the profile under test, default-copy, the default", report.Results)
	}
}

// TestBenchMaxDuration: a run past its MaxDuration starts no further block
// but reports the one it measured, and says why it stopped (with batches
// arriving in bursts: the other arrival).
func TestBenchMaxDuration(t *testing.T) {
	report, err := Bench(context.Background(), BenchSpec{Nodes: 20, Pods: 20, Rounds: 3, NoiseFloor: true, MaxDuration: time.Nanosecond, Arrival: ArrivalBurst}, nil)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, r := range report.Results {
		got = append(got, r.Scheduler)
	}
	if diff := cmp.Diff([]string{"nicaffinity-scheduler", "default-scheduler"}, got); diff != "" {
		t.Errorf("results' profiles (-want,+got):\n%s", diff)
	}
	if len(report.Rounds) != 1 || report.Ratio <= 0 || !strings.Contains(report.Stopped, "stopped before round 1 of default-copy") {
		t.Errorf("rounds %+v, ratio %v, stopped %q: want the first block, a ratio, and why it stopped", report.Rounds, report.Ratio, report.Stopped)
	}
}

// TestBenchMixed runs the mixed workload, batches queued: pods without
// GPUs, two-pod jobs on their rails and VF pods bind in both profiles.
//
// Every placement order must leave room for the VF pods: a batch stalls
// otherwise. A fourth of the nodes are H20s with VFs next to 4 of their 8
// GPUs, so M nodes have M such GPUs, and a VF pod can take no other. Of N
// mixed pods, a fifth ask for 1 GPU and 1 VF each, and the pods without
// VFs ask for 0.8N GPUs in all. Leaving those GPUs to VF pods is a preference of
// plans and packing (TestPlansLeaveVFGPUs), not a guarantee: a tie with a
// fresh switch elsewhere may go either way, so in the worst order every
// GPU of a pod without VFs sits next to VFs. Room for the VF pods in every
// order needs M >= 0.8N + 0.2N, so N <= M. (60 pods on 20 nodes stalled
// once in CI.)
func TestBenchMixed(t *testing.T) {
	report, err := Bench(context.Background(), BenchSpec{Nodes: 40, Pods: 40, Rounds: 1, Workload: WorkloadMixed}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(report.Rounds) != 1 || report.Rounds[0].Ratio <= 0 {
		t.Errorf("rounds: %+v, want one with a ratio", report.Rounds)
	}
	if f := report.Results[0].NICAffinityFiltersPerPod; f == nil || *f <= 0 {
		t.Errorf("NICAffinity's Filter calls per pod %v, want some: VF pods and pods that follow rails do not skip it", f)
	}
}

func TestBenchSpecValidate(t *testing.T) {
	for _, tc := range []struct {
		workload, wantErr string
	}{
		{"", ""},
		{WorkloadGPU, ""},
		{WorkloadMixed, ""},
		{"everything", `workload "everything": want gpu or mixed`},
	} {
		err := BenchSpec{Workload: tc.workload}.Validate()
		if got := fmt.Sprint(err); (tc.wantErr == "" && err != nil) || (tc.wantErr != "" && got != tc.wantErr) {
			t.Errorf("workload %q: error %v, want %q", tc.workload, err, tc.wantErr)
		}
	}
	if err := (BenchSpec{MaxDuration: -time.Second}).Validate(); fmt.Sprint(err) != "max duration -1s: want 0 (no limit) or more" {
		t.Errorf("a negative max duration: error %v", err)
	}
	if err := (BenchSpec{Arrival: "trickle"}).Validate(); fmt.Sprint(err) != `arrival "trickle": want queued or burst` {
		t.Errorf("an unknown arrival: error %v", err)
	}
	if _, err := Bench(context.Background(), BenchSpec{Nodes: 1, Pods: 1, Workload: "x"}, nil); err == nil {
		t.Error("Bench ran a workload it does not know")
	}
}

// TestBenchPodMix: a tenth of a mixed batch has four one-GPU RDMA pods, two
// without GPUs, one two-pod job (both pods naming it) and two VF pods.
func TestBenchPodMix(t *testing.T) {
	kinds := map[string]int{}
	jobs := map[string]int{}
	for i := 0; i < 20; i++ {
		p := benchPod("s", "b0", i, true)
		l := p.Spec.Containers[0].Resources.Limits
		gpus := l.Name("nvidia.com/gpu", resource.DecimalSI).Value()
		switch {
		case gpus == 0:
			kinds["no GPU"]++
		case !l.Name(benchVFResource, resource.DecimalSI).IsZero():
			kinds["VF"]++
		case p.Labels[request.IndexedJobLabel] != "":
			kinds["job pod"]++
			jobs[p.Labels[request.IndexedJobLabel]]++
			if gpus != 2 {
				t.Errorf("%s: %d GPUs, want 2", p.Name, gpus)
			}
		default:
			kinds["one GPU"]++
		}
	}
	if diff := cmp.Diff(map[string]int{"no GPU": 4, "VF": 4, "job pod": 4, "one GPU": 8}, kinds); diff != "" {
		t.Errorf("kinds (-want,+got):\n%s", diff)
	}
	if diff := cmp.Diff(map[string]int{"b0-job-00000": 2, "b0-job-00001": 2}, jobs); diff != "" {
		t.Errorf("jobs (-want,+got):\n%s", diff)
	}
	if p := benchPod("s", "b0", 5, false); p.Spec.Containers[0].Resources.Limits.Name("nvidia.com/gpu", resource.DecimalSI).Value() != 1 {
		t.Errorf("the gpu workload's pod 5: %v, want one GPU", p.Spec.Containers[0].Resources.Limits)
	}
}

// TestRunBatchSurvivesClosedWatch: the apiserver closes a watcher that
// falls behind a burst; runBatch catches up from a list and watches on, so
// every pod is counted once. A stand-in scheduler binds the pods; the
// first watch delivers nothing and is closed halfway.
func TestRunBatchSurvivesClosedWatch(t *testing.T) {
	const pods = 40
	kube := fake.NewClientset()
	first := watch.NewFake()
	watches := 0
	kube.PrependWatchReactor("pods", func(k8stesting.Action) (bool, watch.Interface, error) {
		if watches++; watches == 1 {
			return true, first, nil
		}
		return false, nil, nil
	})
	kube.PrependReactor("delete-collection", "pods", func(k8stesting.Action) (bool, runtime.Object, error) {
		l, err := kube.Tracker().List(corev1.SchemeGroupVersion.WithResource("pods"), corev1.SchemeGroupVersion.WithKind("Pod"), "default")
		if err != nil {
			return true, nil, err
		}
		for _, p := range l.(*corev1.PodList).Items {
			if err := kube.Tracker().Delete(corev1.SchemeGroupVersion.WithResource("pods"), "default", p.Name); err != nil {
				return true, nil, err
			}
		}
		return true, nil, nil
	})
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	go func() { // binds every pod it finds, and closes the first watch halfway
		bound := 0
		for ctx.Err() == nil {
			l, _ := kube.CoreV1().Pods("default").List(ctx, metav1.ListOptions{})
			for _, p := range l.Items {
				if p.Spec.NodeName == "" {
					p.Spec.NodeName = "node"
					if _, err := kube.CoreV1().Pods("default").Update(ctx, &p, metav1.UpdateOptions{}); err == nil {
						if bound++; bound == pods/2 {
							first.Stop()
						}
					}
				}
			}
			time.Sleep(5 * time.Millisecond)
		}
	}()
	b, err := runBatch(ctx, kube, nil, "nicaffinity-scheduler", "p", pods, false, "")
	if err != nil {
		t.Fatal(err)
	}
	if len(b.latencies) != pods || watches < 2 {
		t.Errorf("%d latencies for %d pods over %d watches; want one per pod over at least 2", len(b.latencies), pods, watches)
	}
}

// TestBenchResult: one scheduler's figures from its batches, with no
// scheduler metrics between the two gathers.
func TestBenchResult(t *testing.T) {
	tot := &batchTotals{elapsed: 2 * time.Second, pods: 100}
	for i := 100; i >= 1; i-- {
		tot.latencies = append(tot.latencies, time.Duration(i)*time.Millisecond)
	}
	r := benchResult("nicaffinity-scheduler", tot, nil, nil)
	if r.PodsPerSec != 50 || r.LatencyP50Ms != 51 || r.LatencyP99Ms != 100 || len(r.ExtensionPointsP50Ms) != 0 || len(r.Attempts) != 0 {
		t.Errorf("%+v", r)
	}
}

// TestUnboundSample: a stalled batch's error names a pod without a node and
// its PodScheduled condition.
func TestUnboundSample(t *testing.T) {
	pod := func(name, node string, conds ...corev1.PodCondition) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"}, Spec: corev1.PodSpec{NodeName: node}, Status: corev1.PodStatus{Conditions: conds}}
	}
	unschedulable := corev1.PodCondition{Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: "Unschedulable", Message: "0/2 nodes are available"}
	for _, tc := range []struct {
		name string
		pods []runtime.Object
		want string
	}{
		{"refused", []runtime.Object{pod("a", "n1"), pod("b", "", unschedulable)}, "pod b: PodScheduled=False Unschedulable: 0/2 nodes are available"},
		{"not tried", []runtime.Object{pod("a", "")}, "pod a: not tried yet"},
		{"all bound", []runtime.Object{pod("a", "n1")}, "every pod listed has a node (the watch missed them)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := unboundSample(t.Context(), fake.NewClientset(tc.pods...).CoreV1().Pods("default"), "")
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("(-want,+got):\n%s", diff)
			}
		})
	}
}

// TestHeartbeat: every node's NodeResourceTopology is renewed within a
// period, so no node's topology expires however long a run lasts.
func TestHeartbeat(t *testing.T) {
	cp, err := controlplane.New(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer cp.Stop()
	objs, err := populate(t.Context(), cp, 3, false, t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	before := map[string]string{}
	for _, o := range objs {
		before[o.Name] = o.ResourceVersion
	}
	ctx, cancel := context.WithTimeout(t.Context(), 2500*time.Millisecond)
	defer cancel()
	// A period of a second: each node's heartbeat (RFC 3339, whole seconds)
	// changes from one renewal to the next.
	if err := heartbeat(ctx, cp, objs, time.Second); err != nil {
		t.Fatal(err)
	}
	for _, o := range objs {
		got, err := cp.NRT.TopologyV1alpha2().NodeResourceTopologies().Get(t.Context(), o.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if got.ResourceVersion == before[o.Name] {
			t.Errorf("%s: not renewed (resourceVersion %s)", o.Name, got.ResourceVersion)
		}
	}
}

// TestHold: a held scheduler takes a pod in but binds it only after
// Release, and holds again after Hold, also when its loop was already
// waiting for the next pod (the gate comes after the queue's pop).
func TestHold(t *testing.T) {
	cp, err := controlplane.New(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer cp.Stop()
	if _, err := populate(t.Context(), cp, 2, false, t.TempDir(), nil); err != nil {
		t.Fatal(err)
	}
	if _, err := cp.Kube.CoreV1().Namespaces().Create(t.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "nicaffinity-system"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	cfg, err := benchConfig("", nil)
	if err != nil {
		t.Fatal(err)
	}
	sched, err := schedulerrun.Run(t.Context(), cp, cfg, t.TempDir(), schedulerrun.Options{Hold: true})
	if err != nil {
		t.Fatal(err)
	}
	defer sched.Stop()
	pods := cp.Kube.CoreV1().Pods("default")
	for i := range 2 {
		name := fmt.Sprintf("held-%05d", i)
		if _, err := pods.Create(t.Context(), benchPod("default-scheduler", "held", i, false), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		if err := waitQueued(t.Context(), sched, 1); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		time.Sleep(300 * time.Millisecond) // long enough to bind, were it let go
		if p, err := pods.Get(t.Context(), name, metav1.GetOptions{}); err != nil || p.Spec.NodeName != "" {
			t.Fatalf("%s, held: node %q (error %v), want none", name, p.Spec.NodeName, err)
		}
		if err := sched.Release(); err != nil {
			t.Fatal(err)
		}
		if err := wait.PollUntilContextTimeout(t.Context(), 20*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
			p, err := pods.Get(ctx, name, metav1.GetOptions{})
			return err == nil && p.Spec.NodeName != "", nil
		}); err != nil {
			t.Fatalf("%s, released: not bound: %v", name, err)
		}
		if err := sched.Hold(); err != nil {
			t.Fatal(err)
		}
	}
}
