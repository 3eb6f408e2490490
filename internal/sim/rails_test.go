package sim

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/nicaffinity/nicaffinity/pkg/machines"
	"github.com/nicaffinity/nicaffinity/pkg/topology"
)

// railNode is a node of 4 GPUs: GPUs 0,1 on rail "0", GPU 2 on rail "1",
// GPU 3 aligned to no NIC.
func railNode(name string) nodeInfo {
	return nodeInfo{Name: name, GPUs: []string{"a", "b", "c", "d"}, Aligned: bools(1, 1, 1, 0), Alignable: 3, Rail: []string{"0", "0", "1", ""}}
}

func TestRailsOf(t *testing.T) {
	n := railNode("n")
	for _, tc := range []struct {
		gpus []int
		want []string
		ok   bool
	}{
		{[]int{0, 1}, []string{"0"}, true},
		{[]int{2, 0}, []string{"0", "1"}, true},
		{[]int{0, 3}, nil, false},
		{[]int{9}, nil, false},
	} {
		got, ok := n.railsOf(tc.gpus)
		if diff := cmp.Diff(tc.want, got); diff != "" || ok != tc.ok {
			t.Errorf("railsOf(%v) = %v, %v; want %v, %v", tc.gpus, got, ok, tc.want, tc.ok)
		}
	}
}

// TestDescribeRails: the simulator's rails are the exporter's by PCI rank,
// per GPU the rail of the NIC it is aligned to.
func TestDescribeRails(t *testing.T) {
	topo, err := machines.Discover(t.TempDir(), machines.HalfNICs)
	if err != nil {
		t.Fatal(err)
	}
	n := describeTest(t, "half", topo)
	if diff := cmp.Diff([]string{"", "", "", "", "0", "0", "1", "1"}, n.Rail); diff != "" {
		t.Errorf("half-NIC rails (-want,+got):\n%s", diff)
	}
}

// TestSplitRails: a job is on one rail set when its pods' sets are equal;
// a split is avoidable when, on the nodes its pods got, one of its pods'
// rail sets was free for every pod, counting its own GPUs and not those of
// other running jobs.
func TestSplitRails(t *testing.T) {
	nodes := map[string]nodeInfo{"a": railNode("a"), "b": railNode("b")}
	pod := func(node string, got ...int) podRecord {
		return podRecord{Node: node, Got: got, Running: 0, Bound: 0}
	}
	job := func(pods ...podRecord) *record {
		return &record{job: job{Name: "j", Pods: len(pods), GPUs: len(pods[0].Got), RDMA: true}, Pods: pods, Running: 0, Ended: never}
	}
	same := job(pod("a", 0), pod("b", 1))
	if !same.oneRailSet(nodes) {
		t.Error("two pods on rail 0: not one rail set")
	}
	split := job(pod("a", 0), pod("b", 2))
	if split.oneRailSet(nodes) {
		t.Error("rails 0 and 1: one rail set")
	}
	// Node b's rail-0 GPUs are free: pod 2 could have taken rail 0.
	if !splitAvoidable(split, []*record{split}, nodes) {
		t.Error("split with rail 0 free on b: not avoidable")
	}
	// Another job holds b's rail-0 GPUs, and a's rail-1 GPU: no one set.
	other := job(pod("b", 0, 1))
	other.Name = "other"
	third := job(pod("a", 2))
	if splitAvoidable(split, []*record{split, other, third}, nodes) {
		t.Error("split with rails 0 taken on b and 1 on a: avoidable")
	}
	// An ended job's GPUs are free.
	other.Ended = time.Hour
	if !splitAvoidable(split, []*record{split, other, third}, nodes) {
		t.Error("an ended job's GPUs counted as taken")
	}
}

func TestGangWait(t *testing.T) {
	rec := &record{job: job{Pods: 2, GPUs: 4}, Pods: []podRecord{{Running: time.Minute}, {Running: 3 * time.Minute}}, Running: 3 * time.Minute, Ended: never}
	if got := gangWait(rec, time.Hour); got != 4*2*time.Minute {
		t.Errorf("gang wait %s, want 8m (4 GPUs for 2 minutes)", got)
	}
	never1 := &record{job: job{Pods: 2, GPUs: 1}, Pods: []podRecord{{Running: time.Minute}, {Running: never}}, Running: never, Ended: 11 * time.Minute}
	if got := gangWait(never1, time.Hour); got != 10*time.Minute {
		t.Errorf("a job never whole: %s, want 10m (until it ended)", got)
	}
	if got := gangWait(&record{job: job{Pods: 1, GPUs: 8}, Pods: []podRecord{{Running: 0}}}, time.Hour); got != 0 {
		t.Errorf("a job of one pod: %s", got)
	}
}

// TestCrossRail: split rails slow the job's communication by crossRail,
// and a spec's crossRail outside (0, 1] is refused with its line.
func TestCrossRail(t *testing.T) {
	m := DefaultTimeModel
	on := m.RuntimeOnRails(time.Hour, 2, true, topology.LevelPIX, false)
	split := m.RuntimeOnRails(time.Hour, 2, true, topology.LevelPIX, true)
	// 0.7 h of compute, 0.3 h of communication at half the bandwidth.
	if on != time.Hour || split != 78*time.Minute {
		t.Errorf("on one rail %s, split %s; want 1h, 1h18m", on, split)
	}
	if _, err := ParseWorkload("w.yaml", []byte("timeModel:\n  crossRail: 1.5\n")); err == nil || !strings.Contains(err.Error(), "crossRail") {
		t.Errorf("crossRail 1.5: %v, want a refusal naming it", err)
	}
	w, err := ParseWorkload("w.yaml", []byte("timeModel:\n  crossRail: 1\n"))
	if err != nil || *w.TimeModel.CrossRail != 1 {
		t.Errorf("crossRail 1: %v %v", w.TimeModel.CrossRail, err)
	}
}

// TestJobsGangsAndRails replays a small jobs scenario through the
// gangs+rails column and the default scheduler: the gangs hold no GPU
// before they are whole, never split rails avoidably, and more of their
// jobs are aligned on one rail set than the default scheduler's.
func TestJobsGangsAndRails(t *testing.T) {
	if testing.Short() {
		t.Skip("replays a scenario")
	}
	c := ClusterSpec{Pools: []Pool{{Name: "h100", Count: 2, Machine: "hgx-h100-8gpu-8nic"}, {Name: "half", Count: 2, Machine: "half-nic-8gpu-2nic"}}}
	w := JobsWorkload
	w.Jobs = 16
	p, err := Prepare(c, w)
	if err != nil {
		t.Fatal(err)
	}
	cols, err := ColumnsNamed([]string{"gangs+rails", "default-scheduler"})
	if err != nil {
		t.Fatal(err)
	}
	results := runColumns(t, p, cols, nil)
	if t.Failed() {
		return
	}
	gangs, def := results[0], results[1]
	if gangs.MultiPodJobs == 0 || gangs.MultiPodJobs != def.MultiPodJobs {
		t.Fatalf("multi-pod jobs %d and %d", gangs.MultiPodJobs, def.MultiPodJobs)
	}
	if gangs.SplitRailAvoidable != 0 || gangs.GangWaitHours != 0 {
		t.Errorf("gangs+rails: %d avoidable splits, %.2f GPU-h held before whole; want none", gangs.SplitRailAvoidable, gangs.GangWaitHours)
	}
	if gangs.RailAlignedJobs <= def.RailAlignedJobs {
		t.Errorf("jobs aligned on one rail set: gangs+rails %d, default %d", gangs.RailAlignedJobs, def.RailAlignedJobs)
	}
}
