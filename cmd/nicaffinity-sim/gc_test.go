package main

import (
	"runtime"
	"runtime/debug"
	"testing"
	"time"
)

func TestGCPercent(t *testing.T) {
	for _, tc := range []struct {
		name        string
		floor, live uint64
		want        int
	}{
		{"nothing live yet", 1 << 30, 0, 100},
		{"live heap far below the floor", 1 << 30, 1 << 26, 1500},
		{"the floor at twice the live heap", 1 << 30, 1 << 29, 100},
		{"live heap above half the floor: the default", 1 << 30, 3 << 28, 100},
		{"live heap above the floor: the default", 1 << 30, 1 << 31, 100},
		{"a tiny live heap is capped", 1 << 40, 1, 1<<20 - 100},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := gcPercent(tc.floor, tc.live); got != tc.want {
				t.Errorf("gcPercent(%d, %d) = %d, want %d", tc.floor, tc.live, got, tc.want)
			}
		})
	}
}

// TestTuneGC: after a collection the tuner has raised GOGC for a live heap
// far below the floor, and stop puts the default back.
func TestTuneGC(t *testing.T) {
	t.Setenv("GOGC", "")
	t.Setenv("GOMEMLIMIT", "")
	stop := tuneGC(1 << 34)
	raised := false
	for deadline := time.Now().Add(10 * time.Second); !raised && time.Now().Before(deadline); {
		runtime.GC()
		time.Sleep(10 * time.Millisecond) // finalizers run on their own goroutine
		p := debug.SetGCPercent(100)
		debug.SetGCPercent(p)
		raised = p > 100
	}
	stop()
	if !raised {
		t.Fatal("GOGC stayed at most 100 after collections with a live heap far below the floor")
	}
	runtime.GC()
	time.Sleep(10 * time.Millisecond)
	if p := debug.SetGCPercent(100); p != 100 {
		t.Errorf("GOGC after stop = %d, want 100", p)
	}
}

// TestTuneGCLeavesTheUsersChoice: GOGC in the environment turns the tuner
// off.
func TestTuneGCLeavesTheUsersChoice(t *testing.T) {
	t.Setenv("GOGC", "100")
	stop := tuneGC(1 << 34)
	defer stop()
	for range 3 {
		runtime.GC()
		time.Sleep(10 * time.Millisecond)
	}
	if p := debug.SetGCPercent(100); p != 100 {
		t.Errorf("GOGC = %d with GOGC=100 in the environment, want 100", p)
	}
}
