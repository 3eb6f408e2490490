package nicaffinity

import (
	"context"
	"maps"
	"strings"

	"k8s.io/apimachinery/pkg/types"
	fwk "k8s.io/kube-scheduler/framework"
)

// PlacementScore: with TopologyAwareWorkloadScheduling on and a PodGroup
// topology constraint, the scheduler evaluates one placement per domain
// (a rack, say): every member runs PreFilter to Reserve inside it, then
// every Reserve is undone, and the placements that fit are scored. This
// plugin ranks them by how many of the group's RDMA members got GPUs that
// are aligned and on one rail set there. Without a constraint there is
// one placement and nothing to rank; without RDMA members every placement
// scores alike.

var _ fwk.PlacementScorePlugin = &NICAffinity{}

const placementStateKey fwk.StateKey = "Placement" + Name

// placementState is what Reserve found for each member evaluated in one
// placement. It lives in the placement's own cycle state, which the
// framework makes anew for every placement and hands to ScorePlacement, so
// it outlives the Unreserve that follows every evaluation (which clears
// the member's plan) and never mixes two placements.
//
// Invariant: members holds only pods of the group being evaluated, at most
// one entry each (a member's later Reserve in the same placement replaces
// its entry).
type placementState struct {
	members map[types.UID]memberPlan
}

// memberPlan is one member's plan in a placement: whether every GPU of it
// is at the pod's level or closer to a NIC, and the rails of its NICs.
type memberPlan struct {
	aligned bool
	rails   string // the plan's rails, sorted and joined; "" for none
}

// Clone copies the map: the framework may clone cycle states, and a clone
// must not write into the original.
func (p *placementState) Clone() fwk.StateData {
	return &placementState{members: maps.Clone(p.members)}
}

// recordPlacement notes a member's plan in the placement being evaluated,
// when there is one (a pod-group cycle). The framework writes the
// placement's state from one goroutine, one member after another.
func recordPlacement(cycle fwk.CycleState, pod types.UID, aligned bool, rails []string) {
	ps := cycle.GetPlacementCycleState()
	if ps == nil {
		return
	}
	plan := memberPlan{aligned: aligned, rails: joinRails(rails)}
	var st *placementState
	if d, err := ps.Read(placementStateKey); err == nil {
		st, _ = d.(*placementState)
	}
	if st == nil {
		st = &placementState{members: map[types.UID]memberPlan{}}
		ps.Write(placementStateKey, st)
	}
	st.members[pod] = plan
}

// ScorePlacement is 0 to 100: the share of the placement's RDMA members
// whose plan is aligned and on the rail set most of them share. A member
// this plugin skipped (no GPUs) or that needs no NIC does not count; a
// placement without RDMA members scores 0, as every other one then does.
func (pl *NICAffinity) ScorePlacement(_ context.Context, state fwk.PlacementCycleState, _ fwk.PodGroupInfo, placement *fwk.PodGroupAssignments) (int64, *fwk.Status) {
	var recorded map[types.UID]memberPlan
	if d, err := state.Read(placementStateKey); err == nil {
		if st, ok := d.(*placementState); ok {
			recorded = st.members
		}
	}
	var rdma []memberPlan
	for _, a := range placement.ProposedAssignments {
		s, err := getState(a.GetCycleState())
		if err != nil {
			return 0, fwk.AsStatus(err)
		}
		if s == nil || !s.req.RDMA {
			continue
		}
		// A member with no entry was not planned (a node without a
		// usable object): not aligned as far as this plugin knows.
		rdma = append(rdma, recorded[a.GetPod().UID])
	}
	return placementScore(rdma), nil
}

// placementScore scores members' plans: the aligned members on the most
// common rail set among aligned members, over all members. Members on
// nodes that publish no rails share the rail set "", so there the score
// is alignment alone.
func placementScore(members []memberPlan) int64 {
	if len(members) == 0 {
		return fwk.MinScore
	}
	count := map[string]int{}
	best := 0
	for _, m := range members {
		if m.aligned {
			count[m.rails]++
			best = max(best, count[m.rails])
		}
	}
	return fwk.MinScore + int64(best)*(fwk.MaxScore-fwk.MinScore)/int64(len(members))
}

// PlacementScoreExtensions: the score is already 0 to 100.
func (pl *NICAffinity) PlacementScoreExtensions() fwk.PlacementScoreExtensions { return nil }

// joinRails is the key of a plan's rail set.
func joinRails(rails []string) string { return strings.Join(rails, ",") }
