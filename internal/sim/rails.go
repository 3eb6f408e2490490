package sim

import (
	"slices"
	"time"
)

// Rails in the replay. Every exporter publishes its NICs' rails by PCI
// rank (nrt.RailFromPCIRank), and each GPU counts as using the rail of
// the NIC it is aligned to (nodeInfo.Rail). A multi-pod RDMA job is on one
// rail set when every pod's GPUs are aligned to NICs with rails and the
// pods' rail sets are equal; otherwise its traffic crosses the spine
// (TimeModel.CrossRail).

// splitAvoidable reports whether a job placed with split rails could have
// been placed on one rail set without moving any pod to another node: for
// one of the rail sets its own pods got, every pod's node had, among the
// GPUs free after the moment the job started plus those the job's pods
// took there, enough GPUs aligned to NICs on those rails (a GPU on each of
// them for each pod). Pods placed on other nodes, or GPUs taken by jobs
// placed at the same moment, are not counted, so this is a lower bound of
// the splits a rail-aware choice would have avoided.
func splitAvoidable(rec *record, recs []*record, nodes map[string]nodeInfo) bool {
	used := map[string]map[int]bool{}
	for _, o := range recs {
		if o == rec || o.Ended != never {
			continue
		}
		for _, pr := range o.Pods {
			if pr.Running == never {
				continue
			}
			if used[pr.Node] == nil {
				used[pr.Node] = map[int]bool{}
			}
			for _, g := range pr.Got {
				used[pr.Node][g] = true
			}
		}
	}
	var candidates [][]string
	for _, pr := range rec.Pods {
		if rails, ok := nodes[pr.Node].railsOf(pr.Got); ok && len(rails) <= rec.GPUs &&
			!slices.ContainsFunc(candidates, func(c []string) bool { return slices.Equal(c, rails) }) {
			candidates = append(candidates, rails)
		}
	}
	podsOn := map[string]int{}
	for _, pr := range rec.Pods {
		podsOn[pr.Node]++
	}
	for _, rails := range candidates {
		fits := true
		for node, k := range podsOn {
			n := nodes[node]
			perRail := map[string]int{}
			total := 0
			for g, r := range n.Rail {
				if r == "" || used[node][g] || !slices.Contains(rails, r) {
					continue
				}
				perRail[r]++
				total++
			}
			for _, r := range rails {
				fits = fits && perRail[r] >= k
			}
			fits = fits && total >= k*rec.GPUs
		}
		if fits {
			return true
		}
	}
	return false
}

// gangWait is the GPU-time the pods of a multi-pod job held before the job
// was whole (Running), or until it ended or the replay did if it never was.
func gangWait(rec *record, end time.Duration) time.Duration {
	if len(rec.Pods) < 2 {
		return 0
	}
	whole := rec.Running
	if whole == never {
		whole = rec.Ended
	}
	if whole == never {
		whole = end
	}
	var held time.Duration
	for _, pr := range rec.Pods {
		if pr.Running != never && pr.Running < whole {
			held += time.Duration(rec.GPUs) * (whole - pr.Running)
		}
	}
	return held
}
