//go:build !race

package nicaffinity

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework"

	"github.com/nicaffinity/nicaffinity/pkg/annotations"
)

// proposed is a member's proposed node in one placement, as the scheduler's
// pod-group cycle hands it to ScorePlacement.
type proposed struct {
	pod   *v1.Pod
	node  string
	cycle fwk.CycleState
}

func (p proposed) GetPod() *v1.Pod               { return p.pod }
func (p proposed) GetPodInfo() fwk.PodInfo       { return nil }
func (p proposed) GetNodeName() string           { return p.node }
func (p proposed) GetCycleState() fwk.CycleState { return p.cycle }

// evaluatePlacement does what the scheduler's pod-group cycle does for one
// placement: a fresh placement state; for each member in turn a fresh
// cycle in that placement, PreFilter and Reserve on its node; then every
// Reserve undone; then ScorePlacement on what is left.
func evaluatePlacement(t *testing.T, pl *NICAffinity, pods []*v1.Pod, nodes []string) int64 {
	t.Helper()
	placement := framework.NewCycleState()
	assignments := &fwk.PodGroupAssignments{Placement: &fwk.Placement{Name: "p"}}
	for i, pod := range pods {
		cycle := framework.NewCycleState()
		cycle.SetPlacementCycleState(placement)
		if _, st := pl.PreFilter(t.Context(), cycle, pod, []fwk.NodeInfo{nodeInfo(nodes[i], 8)}); !st.IsSuccess() && !st.IsSkip() {
			t.Fatalf("PreFilter %s: %v", pod.Name, st)
		}
		if st := pl.Reserve(t.Context(), cycle, pod, nodes[i]); !st.IsSuccess() {
			t.Fatalf("Reserve %s on %s: %v", pod.Name, nodes[i], st)
		}
		assignments.ProposedAssignments = append(assignments.ProposedAssignments, proposed{pod: pod, node: nodes[i], cycle: cycle})
	}
	for i := len(pods) - 1; i >= 0; i-- {
		a := assignments.ProposedAssignments[i]
		pl.Unreserve(t.Context(), a.GetCycleState(), pods[i], nodes[i])
	}
	score, st := pl.ScorePlacement(t.Context(), placement, nil, assignments)
	if !st.IsSuccess() {
		t.Fatalf("ScorePlacement: %v", st)
	}
	return score
}

// TestScorePlacement: placements are ranked by the share of the group's
// RDMA members that are aligned and on one rail set there, as Reserve
// planned them, after the framework undid every Reserve. A placement of
// aligned members on one rail set scores 100, one whose members are split
// across rails 50, one where no GPU near a NIC is free 0; members without
// RDMA or GPUs do not count, and a group without RDMA members scores 0 in
// every placement.
func TestScorePlacement(t *testing.T) {
	pl, _ := newTestPlugin(t, nil,
		railedH100(t, "empty1"), railedH100(t, "empty2"),
		railedH100(t, "low", 2, 3, 4, 5, 6, 7), railedH100(t, "high", 0, 1, 2, 3, 4, 5),
		handNRT("far", 4, 5, 6, 7))
	preferred := map[string]string{annotations.Policy: annotations.PolicyPreferred}
	worker := func(name string, gpus int64, extra ...string) *v1.Pod {
		return inJob(makePod(name, gpus, preferred, extra...), "train")
	}
	pair := []*v1.Pod{worker("w0", 2, rdma, "1"), worker("w1", 2, rdma, "1")}
	mixed := []*v1.Pod{worker("w0", 2, rdma, "1"), worker("plain", 2), worker("cpu", 0), worker("w1", 2, rdma, "1")}
	noRDMA := []*v1.Pod{worker("a", 2), worker("b", 2)}

	got := map[string]int64{
		"aligned, one rail set":  evaluatePlacement(t, pl, pair, []string{"empty1", "empty2"}),
		"aligned, split rails":   evaluatePlacement(t, pl, pair, []string{"low", "high"}),
		"one aligned of two":     evaluatePlacement(t, pl, pair, []string{"empty1", "far"}),
		"none aligned":           evaluatePlacement(t, pl, pair, []string{"far", "far"}),
		"others do not count":    evaluatePlacement(t, pl, mixed, []string{"empty1", "empty1", "empty1", "empty2"}),
		"no RDMA members":        evaluatePlacement(t, pl, noRDMA, []string{"empty1", "far"}),
		"no RDMA members either": evaluatePlacement(t, pl, noRDMA, []string{"empty1", "empty2"}),
	}
	want := map[string]int64{
		"aligned, one rail set":  100,
		"aligned, split rails":   50,
		"one aligned of two":     50,
		"none aligned":           0,
		"others do not count":    100,
		"no RDMA members":        0,
		"no RDMA members either": 0,
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("placement scores (-want,+got):\n%s", diff)
	}

	// Every Reserve was undone: nothing is held, no job has rails.
	if jobs, pods := pl.cache.jobs.size(); jobs != 0 || pods != 0 {
		t.Errorf("job store holds %d jobs, %d pods after every Unreserve", jobs, pods)
	}
}

// TestPlacementStateClone: a clone of a placement's state does not write
// into the original.
func TestPlacementStateClone(t *testing.T) {
	orig := &placementState{members: map[types.UID]memberPlan{"a": {aligned: true, rails: "r0"}}}
	c := orig.Clone().(*placementState)
	c.members["b"] = memberPlan{}
	if len(orig.members) != 1 {
		t.Errorf("the clone wrote into the original: %v", orig.members)
	}
}
