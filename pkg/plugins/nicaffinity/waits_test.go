//go:build !race

package nicaffinity

import (
	"errors"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/nicaffinity/nicaffinity/pkg/annotations"
	podreq "github.com/nicaffinity/nicaffinity/pkg/request"
)

// boundedPlugin is a test plugin on a fake clock whose activations are
// recorded (pod names, in order of the calls).
func boundedPlugin(t *testing.T, objs ...any) (*NICAffinity, *testingclock.FakeClock, *[][]string) {
	t.Helper()
	pl, _ := newTestPlugin(t, nil, handNRT("misaligned", 4, 5, 6, 7), handNRT("aligned", 0, 1, 2, 3, 4, 5, 6, 7))
	clk := testingclock.NewFakeClock(time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC))
	var activated [][]string
	pl.waits = newWaits(clk, func(pods map[string]*v1.Pod) {
		activated = append(activated, slices.Sorted(maps.Keys(pods)))
	})
	pl.feed.turnedDown = pl.waits
	return pl, clk, &activated
}

// cycleOn runs PreFilter and Filter for pod on one node; a PreFilter
// Skip (Filter would pass every node) is success.
func cycleOn(t *testing.T, pl *NICAffinity, pod *v1.Pod, node string) *fwk.Status {
	t.Helper()
	cycle, st := preFilter(t, pl, pod, nodeInfo(node, 8))
	if st.IsSkip() {
		return nil
	}
	if !st.IsSuccess() {
		return st
	}
	return pl.Filter(t.Context(), cycle, pod, nodeInfo(node, 8))
}

func boundedPod(name string, uid types.UID, wait string, labels map[string]string) *v1.Pod {
	ann := map[string]string{annotations.Policy: annotations.PolicyBounded}
	if wait != "" {
		ann[annotations.AlignmentWait] = wait
	}
	p := makePod(name, 1, ann, rdma, "1")
	p.UID = uid
	p.Labels = labels
	return p
}

// TestBoundedWaitThenRelax: a bounded pod is turned down by nodes without
// aligned GPUs until it has waited its wait, on the plugin's clock from
// the first time Filter turned a node down for it; then it passes them, as
// a preferred pod would. Its wait's end requeues it with no cluster event.
func TestBoundedWaitThenRelax(t *testing.T) {
	pl, clk, activated := boundedPlugin(t)
	pod := boundedPod("p", "uid-p", "10m", nil)
	clk.Step(time.Hour) // time before the first rejection does not count
	if st := cycleOn(t, pl, pod, "misaligned"); st.Code() != fwk.Unschedulable && st.Code() != fwk.UnschedulableAndUnresolvable {
		t.Fatalf("at first: %v, want turned down", st)
	}
	clk.Step(10*time.Minute - time.Second)
	if st := cycleOn(t, pl, pod, "misaligned"); st.IsSuccess() {
		t.Fatalf("1s before its wait ends: passed, want turned down")
	}
	if len(*activated) != 0 {
		t.Fatalf("activated before the wait ended: %v", *activated)
	}
	if at, ok := pl.NextRelax(); !ok || !at.Equal(clk.Now().Add(time.Second)) {
		t.Errorf("NextRelax = %v %v, want %v", at, ok, clk.Now().Add(time.Second))
	}
	clk.Step(time.Second)
	if diff := cmp.Diff([][]string{{"default/p"}}, *activated); diff != "" {
		t.Errorf("activations when the wait ended (-want,+got):\n%s", diff)
	}
	if st := cycleOn(t, pl, pod, "misaligned"); !st.IsSuccess() {
		t.Errorf("after its wait: %v, want passed (placed as preferred)", st)
	}
	if _, ok := pl.NextRelax(); ok {
		t.Errorf("NextRelax after the only wait ended: want none")
	}
	// Once bound, the pod's wait is forgotten: the next pod waits anew.
	pl.waits.forget(pod.UID)
	again := boundedPod("q", "uid-q", "10m", nil)
	if st := cycleOn(t, pl, again, "misaligned"); st.IsSuccess() {
		t.Errorf("a new pod: passed at once, want turned down")
	}
}

// TestRequiredNeverRelaxes: the same wait under required changes nothing.
func TestRequiredNeverRelaxes(t *testing.T) {
	pl, clk, activated := boundedPlugin(t)
	pod := makePod("r", 1, map[string]string{annotations.Policy: annotations.PolicyRequired}, rdma, "1")
	pod.UID = "uid-r"
	cycleOn(t, pl, pod, "misaligned")
	clk.Step(48 * time.Hour)
	if st := cycleOn(t, pl, pod, "misaligned"); st.IsSuccess() {
		t.Errorf("required after 48h: passed, want turned down")
	}
	if len(*activated) != 0 {
		t.Errorf("required pod activated by a timer: %v", *activated)
	}
}

// TestGangRelaxesWhole: a job's pods share one wait, started by the first
// one turned down; its end requeues them all, and all are relaxed.
func TestGangRelaxesWhole(t *testing.T) {
	pl, clk, activated := boundedPlugin(t)
	job := map[string]string{podreq.IndexedJobLabel: "train"}
	a, b := boundedPod("a", "uid-a", "10m", job), boundedPod("b", "uid-b", "10m", job)
	cycleOn(t, pl, a, "misaligned")
	clk.Step(5 * time.Minute)
	cycleOn(t, pl, b, "misaligned") // joins the job's wait: it does not start its own
	clk.Step(5 * time.Minute)
	if diff := cmp.Diff([][]string{{"default/a", "default/b"}}, *activated); diff != "" {
		t.Errorf("activations (-want,+got):\n%s", diff)
	}
	for _, p := range []*v1.Pod{a, b} {
		if st := cycleOn(t, pl, p, "misaligned"); !st.IsSuccess() {
			t.Errorf("%s after the job's wait: %v", p.Name, st)
		}
	}
}

// TestUnalignableDoesNotWait: a bounded pod that no node could align even
// emptied (every node here has NICs next to 4 of its 8 GPUs) is placed as
// preferred at once, with no wait; a pod some node could align waits; and
// while some node's capacity is unknown (an object that cannot be read, a
// node with GPUs and no object) every pod waits: unknown is not unalignable.
func TestUnalignableDoesNotWait(t *testing.T) {
	pl, _, _ := boundedPlugin(t)
	bounded := map[string]string{annotations.Policy: annotations.PolicyBounded}
	five, four := makePod("five", 5, bounded, rdma, "1"), makePod("four", 4, bounded, rdma, "1")
	if st := cycleOn(t, pl, five, "aligned"); !st.IsSuccess() {
		t.Fatalf("5 GPUs where no node has more than 4 aligned: %v, want placed at once", st)
	}
	if st := cycleOn(t, pl, four, "misaligned"); st.IsSuccess() {
		t.Fatalf("4 GPUs, which the node \"aligned\" could give: passed, want turned down")
	}
	if _, ok := pl.NextRelax(); !ok {
		t.Errorf("the 4-GPU pod does not wait")
	}

	// A node with GPUs and no object: its capacity is unknown.
	cycle, st := preFilter(t, pl, five, nodeInfo("aligned", 8), nodeInfo("no-object", 8))
	if st.IsSuccess() {
		st = pl.Filter(t.Context(), cycle, five, nodeInfo("aligned", 8))
	}
	if st.IsSuccess() {
		t.Errorf("beside a node without an object: passed, want turned down (it might align the pod)")
	}
	// An object that cannot be read: the same.
	pl.cache.set("unreadable", "1", nil, errors.New("garbled"), nil)
	if st := cycleOn(t, pl, five, "aligned"); st.IsSuccess() {
		t.Errorf("beside an unreadable object: passed, want turned down")
	}
	pl.cache.remove("unreadable")
	if st := cycleOn(t, pl, five, "aligned"); !st.IsSuccess() {
		t.Errorf("once the unreadable node left: %v, want placed at once", st)
	}
}

// TestHostileWaits: waits that are no durations, or out of range, are
// refused with the annotation named; a wait beside policy required is a
// contradiction, named.
func TestHostileWaits(t *testing.T) {
	pl, _, _ := boundedPlugin(t)
	for _, tc := range []struct{ ann map[string]string }{
		{map[string]string{annotations.AlignmentWait: "forever"}},
		{map[string]string{annotations.AlignmentWait: "-5m"}},
		{map[string]string{annotations.AlignmentWait: "0s"}},
		{map[string]string{annotations.AlignmentWait: "25h"}},
		{map[string]string{annotations.AlignmentWait: "9999999999999999999h"}},
		{map[string]string{annotations.AlignmentWait: strings.Repeat("1", 4096) + "s"}},
		{map[string]string{annotations.AlignmentWait: "10m", annotations.Policy: annotations.PolicyRequired}},
	} {
		pod := makePod("h", 1, tc.ann, rdma, "1")
		_, st := preFilter(t, pl, pod, nodeInfo("aligned", 8))
		if st.Code() != fwk.UnschedulableAndUnresolvable || !strings.Contains(st.Message(), annotations.AlignmentWait) || len(st.Message()) > 300 {
			t.Errorf("%v: PreFilter = %v %q, want UnschedulableAndUnresolvable naming %s, short", tc.ann, st.Code(), st.Message(), annotations.AlignmentWait)
		}
	}
	args := DefaultArgs()
	args.AlignmentWait.Duration = -time.Second
	if err := validate(args); err == nil || !strings.Contains(err.Error(), "alignmentWait") {
		t.Errorf("alignmentWait -1s: %v, want an error naming it", err)
	}
}

// TestQueueingHints: the hint only reads. While the plugin's store does
// not hold the event's version it skips; the plugin's own informer
// requeues the pods Filter turned down when it brings that version, and
// the hint answers from the store after.
func TestQueueingHints(t *testing.T) {
	pl, _, activated := boundedPlugin(t)
	two, four := makePod("two", 2, nil, rdma, "1"), makePod("four", 4, nil, rdma, "1")
	two.UID, four.UID = "uid-two", "uid-four"
	for _, p := range []*v1.Pod{two, four} {
		if st := cycleOn(t, pl, p, "misaligned"); st.IsSuccess() {
			t.Fatalf("%s on misaligned: passed", p.Name)
		}
	}
	obj := handNRT("misaligned", 0, 1, 2)
	obj.ResourceVersion = "42"
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	if err != nil {
		t.Fatal(err)
	}
	u := &unstructured.Unstructured{Object: m}
	logger := klog.Background()
	before := pl.cache.versions()
	if h, err := pl.isSchedulableAfterNRTChange(logger, two, nil, u); err != nil || h != fwk.QueueSkip {
		t.Errorf("version not in the store: %v %v, want QueueSkip", h, err)
	}
	if diff := cmp.Diff(before, pl.cache.versions()); diff != "" {
		t.Errorf("the hint changed the store (-want,+got):\n%s", diff)
	}
	// A harness that waits for the plugin to hold the version (the
	// simulator's settle) must not see it before the requeue: it would
	// call the moment settled with the pod still parked.
	var heldAtRequeue string
	pl.waits.activate = func(pods map[string]*v1.Pod) {
		heldAtRequeue = pl.cache.versions()["misaligned"]
		*activated = append(*activated, slices.Sorted(maps.Keys(pods)))
	}
	pl.feed.update(u)
	if diff := cmp.Diff([][]string{{"default/two"}}, *activated); diff != "" {
		t.Errorf("the informer's requeue: 3 GPUs free (-want,+got):\n%s", diff)
	}
	if heldAtRequeue == "42" || pl.cache.versions()["misaligned"] != "42" {
		t.Errorf("the plugin said it held version 42 at the requeue (%q) or not after it (%q)", heldAtRequeue, pl.cache.versions()["misaligned"])
	}
	if h, err := pl.isSchedulableAfterNRTChange(logger, two, nil, u); err != nil || h != fwk.Queue {
		t.Errorf("2-GPU pod, 3 free: %v %v, want Queue", h, err)
	}
	if h, _ := pl.isSchedulableAfterNRTChange(logger, four, nil, u); h != fwk.QueueSkip {
		t.Errorf("4-GPU pod, 3 free: %v, want QueueSkip", h)
	}
	if h, _ := pl.isSchedulableAfterNRTChange(logger, four, nil, "garbage"); h != fwk.QueueSkip {
		t.Errorf("garbage object: %v, want QueueSkip", h)
	}
	pl.feed.update(u) // the same version again: nothing new
	if len(*activated) != 1 {
		t.Errorf("the same version requeued again: %v", *activated)
	}
}
