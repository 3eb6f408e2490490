package nicaffinity

import (
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"
)

// The bounded policy: a pod waits up to its Wait for GPUs at its level,
// then is placed as a preferred pod would be (delay scheduling, Zaharia et
// al., EuroSys 2010).
//
// The wait is counted on the scheduler's clock (the plugin's, the replay's
// virtual one in the simulator) from the first moment Filter turned a node
// down for the pod for want of aligned GPUs: that is when alignment, not
// room, is what the pod waits for. Not the pod's creationTimestamp (the
// apiserver's clock, and a pod may wait for room long before alignment
// matters) and never a node's clock. A job waits as one: its pods share
// one wait, started by the first of them, so a gang relaxes whole.
//
// When a wait ends, a timer hands the job's waiting pods to the scheduling
// queue (Handle.Activate): they are retried at once, whether or not any
// cluster event comes, so the worst extra delay is the queue's own (the
// pod is popped next; an in-flight pod is requeued when its cycle ends).
//
// The same record serves a second purpose: it is the list of pods Filter
// turned down, so that when the plugin's own informer brings a new version
// of a node's object (informers.go), the pods that may now fit are
// requeued even if the scheduler's informer brought the event first and
// its queueing hint, which only reads the store, found the older object.
//
// Invariants: a pod is in at most one entry (byPod); an entry exists while
// one of its pods is unbound and not deleted, and its timer is stopped
// when it goes; entries are at most maxWaits, past which a pod is not
// counted and stays required (it waits as under policy required) until
// room frees: the cap bounds memory and timers whatever pods are created.
type waits struct {
	clock clock.WithDelayedExecution
	// activate hands pods to the scheduling queue (Handle.Activate).
	activate func(pods map[string]*v1.Pod)
	max      int

	mu    sync.Mutex
	byKey map[string]*waitEntry
	byPod map[types.UID]string
}

type waitEntry struct {
	// until is when the wait ends; zero while no pod of the job is
	// bounded (nothing ends: the entry only lists pods turned down).
	since, until time.Time
	pods         map[types.UID]waiter
	timer        clock.Timer
}

type waiter struct {
	pod  *v1.Pod
	gpus int
}

// maxWaits bounds the waits kept: one per waiting job or pod.
const maxWaits = 100_000

func newWaits(c clock.WithDelayedExecution, activate func(map[string]*v1.Pod)) *waits {
	return &waits{clock: c, activate: activate, max: maxWaits, byKey: map[string]*waitEntry{}, byPod: map[types.UID]string{}}
}

// waitKey is the job's key, or the pod's own for a job of one.
func waitKey(pod *v1.Pod, job string) string {
	if job != "" {
		return "job/" + job
	}
	return "pod/" + string(pod.UID)
}

// note records a pod Filter turned down (asking gpus GPUs) and, for a
// bounded pod (wait > 0), starts its job's wait if none runs. The clock is
// never called under mu: the fake clock runs due callbacks under its own
// lock, and the callback takes mu.
func (w *waits) note(pod *v1.Pod, job string, gpus int, wait time.Duration) {
	key := waitKey(pod, job)
	now := w.clock.Now()
	w.mu.Lock()
	e, ok := w.byKey[key]
	if !ok && len(w.byKey) >= w.max {
		w.mu.Unlock()
		return
	}
	if !ok {
		e = &waitEntry{since: now, pods: map[types.UID]waiter{}}
		w.byKey[key] = e
	}
	var old clock.Timer
	if k, ok := w.byPod[pod.UID]; ok && k != key {
		old = w.dropLocked(pod.UID)
	}
	e.pods[pod.UID] = waiter{pod: pod, gpus: gpus}
	w.byPod[pod.UID] = key
	starts := wait > 0 && e.until.IsZero()
	if starts {
		e.until = now.Add(wait)
	}
	w.mu.Unlock()
	if old != nil {
		old.Stop()
	}
	if !starts {
		return
	}
	t := w.clock.AfterFunc(wait, func() { w.ended(key) })
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.byKey[key] == e {
		e.timer = t
		return
	}
	t.Stop() // the entry went while the timer was being made
}

// ended hands the job's waiting pods to the queue.
func (w *waits) ended(key string) {
	w.mu.Lock()
	pods := map[string]*v1.Pod{}
	if e := w.byKey[key]; e != nil {
		e.addPods(pods, func(waiter) bool { return true })
	}
	w.mu.Unlock()
	w.hand(pods)
}

// over reports whether the wait of the pod's job has ended.
func (w *waits) over(pod *v1.Pod, job string) bool {
	now := w.clock.Now()
	w.mu.Lock()
	defer w.mu.Unlock()
	e, ok := w.byKey[waitKey(pod, job)]
	return ok && !e.until.IsZero() && !now.Before(e.until)
}

// roomFor hands the queue the pods turned down that ask at most free
// GPUs: a node's object now offers that many.
func (w *waits) roomFor(free int) {
	w.mu.Lock()
	pods := map[string]*v1.Pod{}
	for _, e := range w.byKey {
		e.addPods(pods, func(p waiter) bool { return p.gpus <= free })
	}
	w.mu.Unlock()
	w.hand(pods)
}

// addPods adds the entry's pods that match, keyed namespace/name as
// Handle.Activate takes them; the caller holds mu.
func (e *waitEntry) addPods(pods map[string]*v1.Pod, match func(waiter) bool) {
	for _, p := range e.pods {
		if match(p) {
			pods[p.pod.Namespace+"/"+p.pod.Name] = p.pod
		}
	}
}

// hand gives pods to the queue; the caller does not hold mu.
func (w *waits) hand(pods map[string]*v1.Pod) {
	if len(pods) > 0 && w.activate != nil {
		w.activate(pods)
	}
}

// forget drops a pod that was bound or deleted; its job's wait goes with
// its last waiting pod.
func (w *waits) forget(uid types.UID) {
	w.mu.Lock()
	t := w.dropLocked(uid)
	w.mu.Unlock()
	if t != nil {
		t.Stop()
	}
}

// dropLocked removes the pod and returns the timer of an entry that went.
func (w *waits) dropLocked(uid types.UID) clock.Timer {
	key, ok := w.byPod[uid]
	if !ok {
		return nil
	}
	delete(w.byPod, uid)
	e := w.byKey[key]
	delete(e.pods, uid)
	if len(e.pods) > 0 {
		return nil
	}
	delete(w.byKey, key)
	return e.timer
}

// next is the earliest end of a wait still to come, for a harness that
// moves a virtual clock from one moment to the next (the simulator).
func (w *waits) next() (time.Time, bool) {
	now := w.clock.Now()
	w.mu.Lock()
	defer w.mu.Unlock()
	var at time.Time
	found := false
	for _, e := range w.byKey {
		if !e.until.IsZero() && e.until.After(now) && (!found || e.until.Before(at)) {
			at, found = e.until, true
		}
	}
	return at, found
}
