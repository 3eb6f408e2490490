package schedulerrun

import (
	"errors"
	"fmt"
	"sync"

	"k8s.io/klog/v2"
	"k8s.io/kubernetes/pkg/scheduler"
	"k8s.io/kubernetes/pkg/scheduler/backend/queue"
	"k8s.io/kubernetes/pkg/scheduler/framework"
)

// A holdGate keeps the scheduling loop from going on while it is held, so
// that a benchmark can fill the queue with a whole batch and then time the
// scheduler alone, from its release to the last binding, with no pod
// creation competing for the cores. Released, a pop costs one mutex and a
// receive from a closed channel.
type holdGate struct {
	mu    sync.Mutex
	open  chan struct{} // closed while released
	queue *queue.PriorityQueue
}

func (g *holdGate) attach(sched *scheduler.Scheduler, done <-chan struct{}) error {
	q, ok := sched.SchedulingQueue.(*queue.PriorityQueue)
	if !ok {
		return fmt.Errorf("the scheduler's queue is a %T, not the priority queue the hold reads", sched.SchedulingQueue)
	}
	g.queue, g.open = q, make(chan struct{})
	next := sched.NextEntity
	sched.NextEntity = func(logger klog.Logger) (framework.QueuedEntityInfo, error) {
		// The loop waits in the queue's pop while the queue is empty, so
		// the gate comes after the pop: held, the first pod of a batch is
		// popped but goes no further until Release (ReceivedPods counts it).
		e, err := next(logger)
		g.mu.Lock()
		open := g.open
		g.mu.Unlock()
		select {
		case <-open:
		case <-done: // stopping
		}
		return e, err
	}
	return nil
}

// errNoHold is the error of the hold methods on a scheduler run without
// Options.Hold.
var errNoHold = errors.New("the scheduler was not started with Options.Hold")

// Release lets the scheduling loop pop until Hold.
func (s *Scheduler) Release() error { return s.setHeld(false) }

// Hold stops the scheduling loop until Release: a cycle under way
// finishes, and the next pod popped waits at the gate.
func (s *Scheduler) Hold() error { return s.setHeld(true) }

func (s *Scheduler) setHeld(held bool) error {
	g := s.hold
	if g == nil {
		return errNoHold
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	select {
	case <-g.open: // released
		if held {
			g.open = make(chan struct{})
		}
	default: // held
		if !held {
			close(g.open)
		}
	}
	return nil
}

// ReceivedPods is how many pods wait in the active queue or were popped
// and not yet let go: with the loop held, how many of a batch the
// scheduler has received.
func (s *Scheduler) ReceivedPods() (int, error) {
	if s.hold == nil {
		return 0, errNoHold
	}
	q := s.hold.queue
	return len(q.PodsInActiveQ()) + len(q.InFlightPods()), nil
}
