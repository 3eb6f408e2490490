package nicaffinity

import (
	"sync/atomic"
)

// scoreSpread counts, for each common request that views answer without
// a search (1 to maxAnswered-1 GPUs), how many nodes give each score, so
// that PreScore tells in O(1) whether every candidate node scores alike
// (and Score has nothing to say). For RDMA it counts only the nodes where
// the request fits aligned: the others are no candidates when alignment is
// required (Filter rejects them), and full nodes are common. Without RDMA
// it counts every node. Writers update it under the cache's lock as views
// are published; readers load one word.
type scoreSpread struct {
	// counts cover every value a score byte can hold, not only 0..100.
	counts [maxAnswered][2][256]int32
	// summary[g][kind] is distinct<<8 | score: how many scores nodes give,
	// and the score when they all give one.
	summary [maxAnswered][2]atomic.Uint32
	// unanswered[g] counts nodes that can take g GPUs but answer only by
	// a search (requests of all their GPUs, or past maxAnswered).
	unanswered [maxAnswered]atomic.Int32
}

// Kinds of spread.
const (
	kindAligned = 0 // RDMA, over the nodes where it fits aligned
	kindPlain   = 1 // without RDMA, over every node
)

// replace moves a node's contribution from its old view to its new one
// (either may be nil).
func (sp *scoreSpread) replace(old, new *nodeView) {
	sp.add(old, -1)
	sp.add(new, 1)
}

func (sp *scoreSpread) add(v *nodeView, delta int32) {
	if v == nil || v.C == nil {
		return // scores 0; see uniform
	}
	for g := 1; g < maxAnswered; g++ {
		if g >= v.answered {
			if g <= len(v.C.GPUs) {
				sp.unanswered[g].Add(delta)
			}
			continue
		}
		a := v.answers[g]
		if a.feasible {
			sp.count(g, kindAligned, a.score, delta)
		}
		sp.count(g, kindPlain, a.plain, delta)
	}
}

func (sp *scoreSpread) count(g, kind int, score uint8, delta int32) {
	c := &sp.counts[g][kind][score]
	was := *c
	*c += delta
	if (was == 0) != (*c == 0) {
		sp.resummarize(g, kind)
	}
}

// resummarize recounts the distinct scores of one request; it runs only
// when a score gains its first node or loses its last.
func (sp *scoreSpread) resummarize(g, kind int) {
	distinct, last := uint32(0), uint32(0)
	for score, n := range sp.counts[g][kind] {
		if n > 0 {
			distinct, last = distinct+1, uint32(score)
		}
	}
	sp.summary[g][kind].Store(distinct<<8 | last)
}

// uniform is the one score the counted nodes give a common request of
// gpus GPUs, if there is one and no node needs a search to answer. Nodes
// without a view are not counted: they score 0.
func (sp *scoreSpread) uniform(gpus, kind int) (int64, bool) {
	if gpus < 1 || gpus >= maxAnswered || sp.unanswered[gpus].Load() != 0 {
		return 0, false
	}
	s := sp.summary[gpus][kind].Load()
	return int64(s & 0xff), s>>8 == 1
}
