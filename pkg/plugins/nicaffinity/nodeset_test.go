//go:build !race

package nicaffinity

import (
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/util/sets"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework"

	"github.com/nicaffinity/nicaffinity/pkg/annotations"
	"github.com/nicaffinity/nicaffinity/pkg/nrt"
)

// TestVFNodeIndex: the index follows each node's usable view as objects
// come, break, come back and go; reservations leave it alone; a set handed
// out never changes afterwards.
func TestVFNodeIndex(t *testing.T) {
	pl, c := newTestPlugin(t, nil, sriovNRT(t, 2, 2), handNRT("plain"))
	members := func(s sets.Set[string]) []string {
		if s.Len() == 0 {
			return nil
		}
		return sets.List(s)
	}
	check := func(step string, want ...string) sets.Set[string] {
		t.Helper()
		got := c.vfNodes(sriov)
		if diff := cmp.Diff(want, members(got)); diff != "" {
			t.Errorf("%s: nodes offering %s (-want,+got):\n%s", step, sriov, diff)
		}
		return got
	}
	check("start", "h20")
	if got := c.vfNodes("openshift.io/sriov_net"); got != nil {
		t.Errorf("a resource no object lists: %v, want nil", members(got))
	}

	index := c.vfIndex.Load()
	c.Reserve("h20", "holder", 1<<0, map[int]map[string]int64{0: {sriov: 1}})
	c.Unreserve("h20", "holder")
	if c.vfIndex.Load() != index {
		t.Error("a reservation and its release replaced the index; they change no node's VF resources")
	}

	h20 := sriovNRT(t, 2, 2)
	c.set("h20", "2", nil, errors.New("garbled"), nil)
	check("unreadable object")
	compiled, err := nrt.Compile(h20, pl.args.GPUResourceName)
	if err != nil {
		t.Fatal(err)
	}
	c.set("h20", "3", compiled, nil, nil)
	before := check("readable again", "h20")

	other := sriovNRT(t, 0, 0) // exhausted VFs still list the resource
	other.Name = "h20-b"
	compiledB, err := nrt.Compile(other, pl.args.GPUResourceName)
	if err != nil {
		t.Fatal(err)
	}
	c.set("h20-b", "1", compiledB, nil, nil)
	check("second node", "h20", "h20-b")
	if diff := cmp.Diff([]string{"h20"}, members(before)); diff != "" {
		t.Errorf("a set handed out before changed (-want,+got):\n%s", diff)
	}

	c.remove("h20")
	check("first node removed", "h20-b")
	c.set("h20-b", "2", nil, errors.New("garbled"), nil)
	check("second node unreadable")
}

// TestPreFilterVFCandidates: a required VF pod's candidates are the nodes
// offering its VFs; every other pod is left to all nodes.
func TestPreFilterVFCandidates(t *testing.T) {
	tests := []struct {
		name     string
		args     func(*Args)
		pod      podSpec
		ann      map[string]string
		want     []string // nil: all nodes
		wantCode fwk.Code
		wantMsg  string
	}{
		{name: "required VF pod", pod: podSpec{gpus: 1, extra: []string{sriov, "1"}}, want: []string{"h20"}},
		{name: "RDMA pod without VFs", pod: podSpec{gpus: 1, extra: []string{rdma, "1"}}},
		{name: "preferred VF pod is only scored", pod: podSpec{gpus: 1, extra: []string{sriov, "1"}},
			ann: map[string]string{annotations.Policy: annotations.PolicyPreferred}, wantCode: fwk.Skip},
		{name: "missingTopology: Ignore passes nodes without objects", args: func(a *Args) { a.MissingTopology = MissingIgnore },
			pod: podSpec{gpus: 1, extra: []string{sriov, "1"}}},
		{name: "VFs no node offers", args: func(a *Args) { a.SRIOVResourceNames = []string{sriov, "openshift.io/sriov_net"} },
			pod: podSpec{gpus: 1, extra: []string{sriov, "1", "openshift.io/sriov_net", "1"}}, ann: map[string]string{annotations.Policy: annotations.PolicyRequired},
			wantCode: fwk.UnschedulableAndUnresolvable, wantMsg: "no node's NodeResourceTopology offers VFs of openshift.io/sriov_net"},
		// Bounded (the default): no node could align it, so it does not
		// wait (unalignable.go) and is only scored.
		{name: "VFs no node offers, bounded", args: func(a *Args) { a.SRIOVResourceNames = []string{sriov, "openshift.io/sriov_net"} },
			pod: podSpec{gpus: 1, extra: []string{sriov, "1", "openshift.io/sriov_net", "1"}}, wantCode: fwk.Skip},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			pl, _ := newTestPlugin(t, tc.args, sriovNRT(t, 2, 2), handNRT("plain"))
			res, st := pl.PreFilter(t.Context(), framework.NewCycleState(), makePod("p", tc.pod.gpus, tc.ann, tc.pod.extra...), []fwk.NodeInfo{nodeInfo("h20", 8), nodeInfo("plain", 8)})
			if st.Code() != tc.wantCode || st.Message() != tc.wantMsg {
				t.Fatalf("PreFilter = %v %q, want %v %q", st.Code(), st.Message(), tc.wantCode, tc.wantMsg)
			}
			var got []string
			if !res.AllNodes() {
				got = sets.List(res.NodeNames)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("PreFilterResult nodes (-want,+got):\n%s", diff)
			}
		})
	}
}
