package nicaffinity

import (
	"fmt"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	testingclock "k8s.io/utils/clock/testing"
)

// TestWaitsConcurrent: Filter notes pods from many goroutines while the
// clock fires waits' ends and the informer forgets bound pods (run under
// -race); the fake clock runs due callbacks under its own lock, which
// must not meet the waits' lock in the other order. At the cap a pod is
// not counted.
func TestWaitsConcurrent(t *testing.T) {
	clk := testingclock.NewFakeClock(time.Unix(0, 0))
	var mu sync.Mutex
	activated := 0
	w := newWaits(clk, func(pods map[string]*v1.Pod) { mu.Lock(); activated += len(pods); mu.Unlock() })
	w.max = 50
	pod := func(i int) *v1.Pod {
		return &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprint(i), Namespace: "ns", UID: types.UID(fmt.Sprint("u", i))}}
	}
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 200 {
				p := pod(g*1000 + i%40)
				w.note(p, "", 1, time.Second)
				w.over(p, "")
				if i%3 == 0 {
					w.forget(p.UID)
				}
			}
		})
	}
	wg.Go(func() {
		for range 50 {
			clk.Step(100 * time.Millisecond)
		}
	})
	wg.Wait()
	if n := len(w.byKey); n > w.max {
		t.Errorf("%d waits kept, cap %d", n, w.max)
	}
	if len(w.byKey) != len(w.byPod) {
		t.Errorf("%d waits for %d pods: every pod of one is its own job", len(w.byKey), len(w.byPod))
	}
	clk.Step(time.Hour)
	mu.Lock()
	defer mu.Unlock()
	if activated == 0 {
		t.Errorf("no wait's end requeued anything")
	}
}
