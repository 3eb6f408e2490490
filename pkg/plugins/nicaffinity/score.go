package nicaffinity

import (
	"context"

	v1 "k8s.io/api/core/v1"
	fwk "k8s.io/kube-scheduler/framework"

	"github.com/nicaffinity/nicaffinity/pkg/annotations"
	"github.com/nicaffinity/nicaffinity/pkg/placement"
	"github.com/nicaffinity/nicaffinity/pkg/topology"
)

// PreScore skips Score for pods PreFilter skipped and when every candidate
// node would get the same score: after NormalizeScore that adds the same
// to every node and changes no ranking, while the framework's per-node,
// per-plugin work for Score is most of what the plugin costs a cycle at
// thousands of nodes. Fleets of one shape with a NIC for every GPU score
// every RDMA pod alike. The cache keeps the spread of scores over the
// nodes as views change (spread.go), so this costs one load, not a pass
// over the candidates.
func (pl *NICAffinity) PreScore(_ context.Context, cycle fwk.CycleState, _ *v1.Pod, _ []fwk.NodeInfo) *fwk.Status {
	s, err := getState(cycle)
	if err != nil {
		return fwk.AsStatus(err)
	}
	if s == nil {
		return fwk.NewStatus(fwk.Skip)
	}
	req := &s.req
	if !req.Common {
		return nil
	}
	switch {
	case !req.RDMA:
		// Every node is a candidate, nodes without a view too: they
		// score 0.
		if score, ok := pl.cache.uniformScore(req.GPUs, kindPlain); ok && score == 0 {
			return fwk.NewStatus(fwk.Skip)
		}
	case req.Required && pl.args.MissingTopology == MissingReject:
		// Filter let through only nodes with a view where the pod fits aligned.
		if _, ok := pl.cache.uniformScore(req.GPUs, kindAligned); ok {
			return fwk.NewStatus(fwk.Skip)
		}
	}
	return nil
}

// Score combines (with the configured strategy) the best level the node
// offers, the certainty that the device plugin hands out aligned GPUs, and
// packing. Nodes without a usable object score 0.
func (pl *NICAffinity) Score(_ context.Context, cycle fwk.CycleState, _ *v1.Pod, nodeInfo fwk.NodeInfo) (int64, *fwk.Status) {
	s, err := getState(cycle)
	if err != nil {
		return 0, fwk.AsStatus(err)
	}
	if s == nil {
		return 0, nil // skipped pod: every node alike
	}
	req := &s.req
	v := pl.cache.view(nodeInfo.Node().Name)
	if v == nil || v.C == nil {
		return 0, nil
	}
	if a, ok := v.commonAnswer(req); ok {
		if req.RDMA {
			return int64(a.score), nil
		}
		return int64(a.plain), nil
	}
	steps := placement.MaxCallSteps
	score := pl.scoring.nodeScore(v, req, &steps)
	if len(req.JobRails) > 0 && req.RDMA {
		// Rails first: a node where the pod fits on its job's rails
		// ranks above every node where it does not.
		score /= 2
		if v.RailsFit(req, placement.LevelIndex(req.MaxLevel)) {
			score += fwk.MaxNodeScore / 2
		}
	}
	return score, nil
}

// scoring is how nodes are scored: a pure value made from the args once
// (the store holds it to precompute views' answers; no callback into the
// plugin).
type scoring struct {
	// defaults is the request a pod makes without annotations (level and
	// policy from args); pods that keep them are "common".
	defaults request
	strategy ScoringStrategy
	score    scorer
}

// newScoring is the scoring of valid, defaulted args.
func newScoring(args *Args) *scoring {
	return &scoring{defaults: request{MaxLevel: maxLevelOf(args), Required: args.DefaultPolicy != annotations.PolicyPreferred, Common: true},
		strategy: args.ScoringStrategy, score: strategies[args.ScoringStrategy.Type]}
}

// precompute fills a new view's answers for common requests of 1 to
// len(GPUs)-1 GPUs (a request of every GPU needs no search: Filter passes
// it, Score gives MaxNodeScore). They are nodeScore's and feasible's
// answers, computed together: plan's greedy picks do not depend on the
// number of GPUs asked for (planner), so one sequence of picks per level
// plans every size, and whether a pick packs well does not depend on the
// other picks (packer), so packing is a running count. Every view that
// Reserve, Unreserve or a new object publishes runs this, on the
// scheduling thread for Reserve: O(levels x GPUs^2), not one search per
// size. TestPrecomputedAnswers holds it to the search, answer by answer.
func (sc *scoring) precompute(v *nodeView) {
	n := min(len(v.C.GPUs), maxAnswered)
	if n < 2 {
		return
	}
	v.answered = n
	li0 := placement.LevelIndex(sc.defaults.MaxLevel)
	plain, rdma := sc.defaults, sc.defaults
	plain.GPUs, rdma.GPUs, rdma.RDMA = 1, 1, true
	// plainGood[k] and good[k]: how many of plan's first k picks pack well,
	// for pods without RDMA (planned at the last level) and for RDMA pods
	// at level index pickedAt (the best level a size can have; sizes that
	// share it share its picks, of which there are picks).
	var plainGood, good [maxAnswered]int
	plainPicks := v.packedPicks(&plain, len(topology.Levels)-1, plainGood[:n])
	pickedAt := -1
	picks := 0
	for g := 1; g < n; g++ {
		a := answer{feasible: (v.Free & v.C.AnyNear[li0]).Count() >= g}
		if k := min(g, plainPicks); k > 0 {
			a.plain = uint8(int64(100 * placement.Packed(plainGood[k], k)))
		}
		li := -1
		for l := range topology.Levels {
			if (v.Free & v.C.AnyNear[l]).Count() >= g {
				li = l
				break
			}
		}
		if li >= 0 {
			if li != pickedAt {
				picks, pickedAt = v.packedPicks(&rdma, li, good[:n]), li
			}
			rdma.GPUs = g
			certainty := int64(100 * v.Certainty(&rdma, li0))
			a.score = uint8(sc.score(sc.strategy, levelScore[li], certainty, int64(100*placement.Packed(good[min(g, picks)], g))))
		}
		v.answers[g] = a
	}
}

// packedPicks runs plan's greedy choice for req at level index li, up to
// len(good)-1 picks, and counts in good[k] how many of the first k pack
// well (good[0] is 0). It returns the number of picks made.
func (v *nodeView) packedPicks(req *request, li int, good []int) int {
	p, gpus := v.Planner(req, li)
	pk := v.Packer(req)
	k := 0
	for k+1 < len(good) {
		g := p.Next(gpus)
		if g < 0 {
			break
		}
		gpus |= 1 << g
		k++
		good[k] = good[k-1]
		if pk.Good(g) {
			good[k]++
		}
	}
	return k
}

// levelScore is the level part of a node's score per index of
// topology.Levels: PIX 100, PXB 80, P2C 70, PHB 60, NODE 40, SYS 20. P2C
// ranks below PXB (NCCL's order: the path crosses the CPU) and above PHB
// (NCCL's default uses GPUDirect RDMA on it).
var levelScore = [...]int64{100, 80, 70, 60, 40, 20}

// nodeScore is Score on a usable view, within the call's search budget
// *steps, which every level tried shares.
func (sc *scoring) nodeScore(v *nodeView, req *request, steps *int) int64 {
	if req.GPUs > len(v.C.GPUs) || !req.RDMA && req.GPUs == len(v.C.GPUs) {
		return fwk.MaxNodeScore
	}
	if !req.RDMA {
		planned := v.Plan(req, len(topology.Levels)-1)
		return int64(100 * v.Packing(req, planned))
	}
	li := v.BestLevel(req, steps)
	if li < 0 {
		return 0
	}
	level := levelScore[li]
	certainty := int64(100 * v.Certainty(req, placement.LevelIndex(req.MaxLevel)))
	packing := int64(100 * v.Packing(req, v.Plan(req, li)))
	return sc.score(sc.strategy, level, certainty, packing)
}

// ScoreExtensions returns the normalizer.
func (pl *NICAffinity) ScoreExtensions() fwk.ScoreExtensions { return pl }

// NormalizeScore stretches scores so the best node gets MaxNodeScore.
func (pl *NICAffinity) NormalizeScore(_ context.Context, _ fwk.CycleState, _ *v1.Pod, scores fwk.NodeScoreList) *fwk.Status {
	var highest int64
	for _, s := range scores {
		highest = max(highest, s.Score)
	}
	if highest == 0 {
		return nil
	}
	for i := range scores {
		scores[i].Score = scores[i].Score * fwk.MaxNodeScore / highest
	}
	return nil
}
