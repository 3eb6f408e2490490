package main

import (
	"os"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"sync"
	"sync/atomic"
)

// simHeapFloor is the heap a simulation may grow to before it collects
// garbage. A replay allocates fast (a control plane, a scheduler and a
// cluster's informers decoding every write) over a live heap of a few
// hundred megabytes, and the garbage collector's default, a cycle whenever
// the heap doubles, spent about a sixth of make demo's CPU. Letting the
// heap reach the floor first cut make demo's user CPU by about a sixth, at
// half as much memory again at its peak (docs/simulate.md, Speed).
const simHeapFloor = 2 << 30

// tuneGC lets the heap grow to floor between collections, and never less
// than the default's doubling of the live heap: after every cycle it sets
// GOGC so that the next cycle starts at max(floor, 2 × live). Unlike a
// memory limit, it cannot make collections more frequent than the default
// when the live heap itself nears the floor (the large scenarios). A GOGC or
// GOMEMLIMIT in the environment is the user's choice and wins. stop puts
// the default back.
func tuneGC(floor uint64) (stop func()) {
	if os.Getenv("GOGC") != "" || os.Getenv("GOMEMLIMIT") != "" {
		return func() {}
	}
	var stopped atomic.Bool
	var mu sync.Mutex // orders the last SetGCPercent before stop's
	sample := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	var arm func()
	arm = func() {
		// A sentinel with a pointer is never batched by the tiny allocator,
		// so it dies, and its finalizer runs, after every cycle.
		s := &struct{ _ *byte }{}
		runtime.SetFinalizer(s, func(*struct{ _ *byte }) {
			mu.Lock()
			defer mu.Unlock()
			if stopped.Load() {
				return
			}
			metrics.Read(sample)
			debug.SetGCPercent(gcPercent(floor, sample[0].Value.Uint64()))
			arm()
		})
	}
	arm()
	return func() {
		mu.Lock()
		defer mu.Unlock()
		stopped.Store(true)
		debug.SetGCPercent(100)
	}
}

// gcPercent is the GOGC that starts the next cycle at max(floor, 2 × live).
func gcPercent(floor, live uint64) int {
	if live == 0 || floor <= 2*live {
		return 100
	}
	return int(min(floor*100/live, 1<<20)) - 100
}
