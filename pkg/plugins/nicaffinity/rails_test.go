//go:build !race

package nicaffinity

import (
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/k8stopologyawareschedwg/noderesourcetopology-api/pkg/apis/topology/v1alpha2"
	v1 "k8s.io/api/core/v1"
	fwk "k8s.io/kube-scheduler/framework"

	"github.com/nicaffinity/nicaffinity/pkg/annotations"
	"github.com/nicaffinity/nicaffinity/pkg/machines"
	"github.com/nicaffinity/nicaffinity/pkg/nrt"
	"github.com/nicaffinity/nicaffinity/pkg/placement"
	"github.com/nicaffinity/nicaffinity/pkg/topology"
)

// railedH100 is an HGX H100's object with NIC k (next to GPU k) on rail
// "r<k>", the GPUs at positions used taken.
func railedH100(t *testing.T, node string, used ...int) *v1alpha2.NodeResourceTopology {
	t.Helper()
	o := machineNRT(t, node, machines.HGXH100, used...)
	k := 0
	for i := range o.Zones {
		if o.Zones[i].Type == nrt.ZoneNIC {
			o.Zones[i].Attributes = append(o.Zones[i].Attributes,
				v1alpha2.AttributeInfo{Name: nrt.AttrRail, Value: fmt.Sprintf("r%d", k)},
				v1alpha2.AttributeInfo{Name: nrt.AttrRailSource, Value: nrt.RailFromPCIRank})
			k++
		}
	}
	if k != 8 {
		t.Fatalf("%d NIC zones, want 8", k)
	}
	return o
}

// railCase is what Filter and Score said of each node.
type railCase struct {
	Filter map[string]string // node -> "" (passes) or the rejection
	Score  map[string]int64
}

// runRails runs PreFilter, then Filter and Score on each node, for pod.
func runRails(t *testing.T, pl *NICAffinity, pod *v1.Pod, nodes ...string) (fwk.CycleState, railCase) {
	t.Helper()
	var infos []fwk.NodeInfo
	for _, n := range nodes {
		infos = append(infos, nodeInfo(n, 8))
	}
	cycle, st := preFilter(t, pl, pod, infos...)
	if !st.IsSuccess() && !st.IsSkip() {
		t.Fatalf("PreFilter: %v", st)
	}
	got := railCase{Filter: map[string]string{}, Score: map[string]int64{}}
	for _, ni := range infos {
		got.Filter[ni.Node().Name] = pl.Filter(t.Context(), cycle, pod, ni).Message()
		s, st := pl.Score(t.Context(), cycle, pod, ni)
		if !st.IsSuccess() {
			t.Fatalf("Score: %v", st)
		}
		got.Score[ni.Node().Name] = s
	}
	return cycle, got
}

// TestRailsFollowJob: a job's second pod goes where its GPUs' NICs are on
// the rails the first pod took: Score ranks that node first, Reserve plans
// onto those rails and records them in the plan, and under rails: required
// Filter refuses a node whose free aligned GPUs are on other rails. A pod of
// a job with the same name in another namespace is not steered, and the
// job's rails go with its last pod.
func TestRailsFollowJob(t *testing.T) {
	// "first" has every GPU free; "low" has GPUs 0,1 free (rails r0, r1);
	// "high" GPUs 6,7 (rails r6, r7).
	pl, st := newTestPlugin(t, nil, railedH100(t, "first"),
		railedH100(t, "low", 2, 3, 4, 5, 6, 7), railedH100(t, "high", 0, 1, 2, 3, 4, 5))
	worker := func(name string, ann map[string]string) *v1.Pod {
		return inJob(makePod(name, 2, ann, rdma, "1"), "train")
	}

	// The first pod: no rails yet, the plan takes GPUs 0,1 on "first".
	first := worker("w0", nil)
	firstCycle, _ := runRails(t, pl, first, "first")
	if st := pl.Reserve(t.Context(), firstCycle, first, "first"); !st.IsSuccess() {
		t.Fatal(st)
	}
	s, _ := getState(firstCycle)
	if diff := cmp.Diff([]string{"r0", "r1"}, s.planned.Rails); diff != "" {
		t.Errorf("first plan's rails (-want,+got):\n%s", diff)
	}

	// The second pod, preferred: both nodes pass, "low" ranks first.
	second := worker("w1", nil)
	cycle, got := runRails(t, pl, second, "low", "high")
	want := railCase{Filter: map[string]string{"low": "", "high": ""}, Score: got.Score}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("preferred (-want,+got):\n%s", diff)
	}
	if got.Score["low"] <= got.Score["high"] {
		t.Errorf("scores %v: the node on the job's rails should rank first", got.Score)
	}
	if st := pl.Reserve(t.Context(), cycle, second, "low"); !st.IsSuccess() {
		t.Fatal(st)
	}
	s, _ = getState(cycle)
	if diff := cmp.Diff([]string{"r0", "r1"}, s.planned.Rails); diff != "" {
		t.Errorf("second plan's rails (-want,+got):\n%s", diff)
	}
	pl.Unreserve(t.Context(), cycle, second, "low")

	// Required: the node on other rails is refused, and says why.
	_, got = runRails(t, pl, worker("w2", map[string]string{annotations.Rails: "required"}), "low", "high")
	if got.Filter["low"] != "" || !strings.Contains(got.Filter["high"], "on the rails of the pod's job (r0, r1; nicaffinity.io/rails: required)") {
		t.Errorf("required: %q", got.Filter)
	}

	// Another namespace's job of the same name sees no rails: its pod
	// scores both nodes alike.
	other := worker("x0", nil)
	other.Namespace = "tenant-b"
	_, got = runRails(t, pl, other, "low", "high")
	if got.Score["low"] != got.Score["high"] {
		t.Errorf("another namespace's job was steered: %v", got.Score)
	}

	// Ignored rails: alike too.
	_, got = runRails(t, pl, worker("w3", map[string]string{annotations.Rails: "ignore"}), "low", "high")
	if got.Score["low"] != got.Score["high"] {
		t.Errorf("rails: ignore was steered: %v", got.Score)
	}

	pl.Unreserve(t.Context(), firstCycle, first, "first")
	if jobs, pods := st.jobs.size(); jobs != 0 || pods != 0 {
		t.Errorf("after the last pod: %d jobs, %d pods tracked", jobs, pods)
	}
}

// TestRailsWiderPod: a pod that needs more GPUs than its job has rails
// takes one GPU on each of them, and fits only where it can.
func TestRailsWiderPod(t *testing.T) {
	pl, _ := newTestPlugin(t, nil, railedH100(t, "first"),
		railedH100(t, "has-r0", 2, 3, 4, 5, 6, 7), railedH100(t, "no-r0", 0, 1, 2, 3, 4, 5))
	first := inJob(makePod("w0", 1, map[string]string{annotations.Rails: "required"}, rdma, "1"), "wide")
	cycle, _ := runRails(t, pl, first, "first")
	if st := pl.Reserve(t.Context(), cycle, first, "first"); !st.IsSuccess() {
		t.Fatal(st)
	}
	wide := inJob(makePod("w1", 2, map[string]string{annotations.Rails: "required"}, rdma, "1"), "wide")
	cycle, got := runRails(t, pl, wide, "has-r0", "no-r0")
	if got.Filter["has-r0"] != "" || got.Filter["no-r0"] == "" {
		t.Errorf("filter %q: the pod must reach rail r0", got.Filter)
	}
	if st := pl.Reserve(t.Context(), cycle, wide, "has-r0"); !st.IsSuccess() {
		t.Fatal(st)
	}
	s, _ := getState(cycle)
	if diff := cmp.Diff([]string{"r0", "r1"}, s.planned.Rails); diff != "" {
		t.Errorf("rails (-want,+got):\n%s", diff)
	}
}

// TestRailsUnknown: on nodes that publish no rails nothing changes, and a
// required pod of a job that has none yet is placed as any other.
func TestRailsUnknown(t *testing.T) {
	pl, st := newTestPlugin(t, nil, machineNRT(t, "a", machines.HGXH100), machineNRT(t, "b", machines.HGXH100, 0, 1))
	p := inJob(makePod("w0", 2, map[string]string{annotations.Rails: "required"}, rdma, "1"), "norails")
	cycle, got := runRails(t, pl, p, "a", "b")
	if got.Filter["a"] != "" || got.Filter["b"] != "" {
		t.Errorf("filter %q", got.Filter)
	}
	if st := pl.Reserve(t.Context(), cycle, p, "a"); !st.IsSuccess() {
		t.Fatal(st)
	}
	if s, _ := getState(cycle); len(s.planned.Rails) != 0 {
		t.Errorf("rails %v from a node that publishes none", s.planned.Rails)
	}
	if jobs, _ := st.jobs.size(); jobs != 0 {
		t.Errorf("%d jobs tracked with no rails known", jobs)
	}
}

// TestGangUnreserveFreesAll: what the framework does to a pod group whose
// quorum never comes (GangScheduling's Permit times out after 5 minutes)
// or that does not fit whole: every member reserved so far is unreserved.
// The GPUs each held are free again on every node, and the job's rails go
// with them, so the next attempt starts from nothing.
func TestGangUnreserveFreesAll(t *testing.T) {
	pl, st := newTestPlugin(t, nil, railedH100(t, "a"), railedH100(t, "b"))
	type member struct {
		pod   *v1.Pod
		cycle fwk.CycleState
		node  string
	}
	var members []member
	for i, node := range []string{"a", "b", "a"} {
		p := inJob(makePod(fmt.Sprintf("m%d", i), 2, nil, rdma, "1"), "gang")
		cycle, _ := runRails(t, pl, p, node)
		if st := pl.Reserve(t.Context(), cycle, p, node); !st.IsSuccess() {
			t.Fatal(st)
		}
		members = append(members, member{p, cycle, node})
	}
	if v, _ := st.View("a"); v.Free.Count() != 4 {
		t.Fatalf("node a: %d free GPUs with two members reserved, want 4", v.Free.Count())
	}
	if got := st.jobs.rails("default/gang"); len(got) == 0 {
		t.Fatal("no rails recorded for the gang")
	}
	for _, m := range members {
		pl.Unreserve(t.Context(), m.cycle, m.pod, m.node)
	}
	for _, node := range []string{"a", "b"} {
		if v, _ := st.View(node); v.Free.Count() != 8 || st.reserving(node) {
			t.Errorf("node %s after the gang's Unreserve: %d free GPUs, reservations %v", node, v.Free.Count(), st.reserving(node))
		}
	}
	if jobs, pods := st.jobs.size(); jobs != 0 || pods != 0 {
		t.Errorf("after the gang's Unreserve: %d jobs, %d pods tracked", jobs, pods)
	}
}

// TestRailRoomBounded: railRoom reads every node of a small cluster and at
// most maxRailRoomNodes of a larger one. Every node here has one free GPU
// next to each rail, so a rail's room is the number of nodes read.
func TestRailRoomBounded(t *testing.T) {
	li := placement.LevelIndex(topology.LevelPXB)
	one := railedH100(t, "n")
	for _, tc := range []struct {
		nodes, want int
	}{
		{3, 3},
		{maxRailRoomNodes, maxRailRoomNodes},
		{maxRailRoomNodes + 20, maxRailRoomNodes},
	} {
		var objs []*v1alpha2.NodeResourceTopology
		for i := 0; i < tc.nodes; i++ {
			o := one.DeepCopy()
			o.Name = fmt.Sprintf("n%03d", i)
			objs = append(objs, o)
		}
		_, st := newTestPlugin(t, nil, objs...)
		room := st.railRoom(li, 1)
		if len(room) != 8 {
			t.Fatalf("%d nodes: rails %v, want 8", tc.nodes, room)
		}
		for r, n := range room {
			if n != tc.want {
				t.Errorf("%d nodes: rail %s has room %d, want %d", tc.nodes, r, n, tc.want)
			}
		}
	}
}

// liarH100 is an HGX H100's object whose exporter names every NIC's rail
// as rail (a compromised node claiming all its free GPUs for one rail).
func liarH100(t *testing.T, node, rail string) *v1alpha2.NodeResourceTopology {
	o := railedH100(t, node)
	for i := range o.Zones {
		for j, a := range o.Zones[i].Attributes {
			if a.Name == nrt.AttrRail {
				o.Zones[i].Attributes[j].Value = rail
			}
		}
	}
	return o
}

// TestRailsNodeCannotSteerOthers: the round-4 audit's attack. A job's
// first pod goes on honest node h, on the rail with the most room over the
// cluster: r0 (free on a, b, c and h) over r3 (free on a and h). A
// compromised node claiming 8 free GPUs on r3 moved it to r3; now a node
// weighs one pod's worth per rail, as an honest node with room does, so
// the pod stays on r0. A rail only the compromised node names ("evil")
// is never recorded for the job that lands there, so the job's next pods
// elsewhere are not held to it.
func TestRailsNodeCannotSteerOthers(t *testing.T) {
	honest := []*v1alpha2.NodeResourceTopology{railedH100(t, "h"), railedH100(t, "a", 1, 2, 4, 5, 6, 7),
		railedH100(t, "b", 1, 2, 3, 4, 5, 6, 7), railedH100(t, "c", 1, 2, 3, 4, 5, 6, 7)}
	firstRail := func(objs ...*v1alpha2.NodeResourceTopology) []string {
		t.Helper()
		pl, _ := newTestPlugin(t, nil, objs...)
		pod := inJob(makePod("w0", 1, nil, rdma, "1"), "train")
		cycle, _ := runRails(t, pl, pod, "h")
		if st := pl.Reserve(t.Context(), cycle, pod, "h"); !st.IsSuccess() {
			t.Fatal(st)
		}
		s, _ := getState(cycle)
		return s.planned.Rails
	}
	if diff := cmp.Diff([]string{"r0"}, firstRail(honest...)); diff != "" {
		t.Fatalf("honest cluster (-want,+got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"r0"}, firstRail(append(honest, liarH100(t, "liar", "r3"))...)); diff != "" {
		t.Errorf("beside a node claiming 8 free GPUs on r3 (-want,+got):\n%s", diff)
	}

	pl, st := newTestPlugin(t, nil, append(honest, liarH100(t, "liar", "evil"))...)
	pod := inJob(makePod("w0", 1, nil, rdma, "1"), "train")
	pod.UID = "uid-w0"
	cycle, _ := runRails(t, pl, pod, "liar")
	if r := pl.Reserve(t.Context(), cycle, pod, "liar"); !r.IsSuccess() {
		t.Fatal(r)
	}
	s, _ := getState(cycle)
	if diff := cmp.Diff([]string{"evil"}, s.planned.Rails); diff != "" {
		t.Errorf("the plan on the liar names its NIC's rail as published (-want,+got):\n%s", diff)
	}
	if got := st.jobs.rails("default/train"); got != nil {
		t.Errorf("the job holds rails %v that only one node names", got)
	}
}
