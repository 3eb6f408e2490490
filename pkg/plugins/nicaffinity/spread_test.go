package nicaffinity

import (
	"testing"

	"github.com/nicaffinity/nicaffinity/pkg/nrt"
	"github.com/nicaffinity/nicaffinity/pkg/placement"
)

// TestScoreSpread drives the spread with hand-made views: it tracks the
// distinct scores per request as views come, change and go, counts only
// feasible nodes for RDMA, holds any score byte, and refuses to call a
// request uniform while some node answers it only through its view.
func TestScoreSpread(t *testing.T) {
	// view builds a view of gpus GPUs answering 1..answered-1 with score
	// s for RDMA (feasible where fits) and plain p.
	view := func(gpus, answered int, fits bool, s, p uint8) *nodeView {
		v := &nodeView{Node: placement.Node{C: &nrt.Compiled{GPUs: make([]nrt.CompiledGPU, gpus)}}, answered: answered}
		for g := 1; g < answered; g++ {
			v.answers[g] = answer{feasible: fits, score: s, plain: p}
		}
		return v
	}
	type want struct {
		g, kind int
		score   int64
		ok      bool
	}
	var sp scoreSpread
	check := func(stage string, wants ...want) {
		t.Helper()
		for _, w := range wants {
			if score, ok := sp.uniform(w.g, w.kind); ok != w.ok || (ok && score != w.score) {
				t.Errorf("%s: uniform(%d, %d) = %d, %v; want %d, %v", stage, w.g, w.kind, score, ok, w.score, w.ok)
			}
		}
	}
	check("empty", want{1, kindAligned, 0, false}, want{1, kindPlain, 0, false})

	a, b := view(8, 8, true, 83, 0), view(8, 8, true, 83, 0)
	sp.replace(nil, a)
	sp.replace(nil, b)
	check("two alike", want{1, kindAligned, 83, true}, want{7, kindPlain, 0, true})

	full := view(8, 8, false, 0, 40)
	sp.replace(nil, full)
	check("a full node", want{1, kindAligned, 83, true}, want{1, kindPlain, 0, false})

	b2 := view(8, 8, true, 200, 0) // past 100: still counted, no panic
	sp.replace(b, b2)
	check("one changed", want{3, kindAligned, 0, false})
	sp.replace(b2, b)
	sp.replace(full, &nodeView{why: "gone"})
	check("back, full node gone", want{3, kindAligned, 83, true}, want{3, kindPlain, 0, true})

	big := view(16, 8, true, 83, 0)  // answers past 7 GPUs only in its view
	small := view(4, 4, true, 83, 0) // takes 4 GPUs only whole
	sp.replace(nil, big)
	check("16-GPU node", want{7, kindAligned, 83, true})
	sp.replace(nil, small)
	check("4-GPU node", want{3, kindAligned, 83, true}, want{4, kindAligned, 0, false}, want{5, kindAligned, 83, true})
	sp.replace(small, nil)
	check("4-GPU node gone", want{4, kindAligned, 83, true})
	check("out of range", want{0, kindAligned, 0, false}, want{maxAnswered, kindAligned, 0, false})
}
