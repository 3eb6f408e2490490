// Package runenv lets the test machinery (control plane, simulated cluster)
// run outside `go test`, for the simulator: Env implements the
// ktesting.TB those packages take, collects cleanups, and turns Fatal into
// an error returned by Run.
package runenv

import (
	"errors"
	"fmt"
	"os"
	"sync"

	"k8s.io/klog/v2"
)

// Env is one run.
type Env struct {
	name     string
	mu       sync.Mutex
	cleanups []func()
	failed   bool
	errs     []string
}

// New starts an environment called name (used in temp dir names and logs).
func New(name string) *Env { return &Env{name: name} }

type fatal struct{ msg string }

// Run calls f; a Fatal inside it ends f and comes back as the error.
func (e *Env) Run(f func()) (err error) {
	defer func() {
		if r := recover(); r != nil {
			if ft, ok := r.(fatal); ok {
				err = errors.New(ft.msg)
				return
			}
			panic(r)
		}
	}()
	f()
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.failed {
		return fmt.Errorf("%s: %v", e.name, e.errs)
	}
	return nil
}

// Close runs the cleanups, last first.
func (e *Env) Close() {
	e.mu.Lock()
	cs := e.cleanups
	e.cleanups = nil
	e.mu.Unlock()
	for i := len(cs) - 1; i >= 0; i-- {
		cs[i]()
	}
}

// Attr is recorded nowhere.
func (e *Env) Attr(string, string) {}

// Chdir is not supported outside tests.
func (e *Env) Chdir(dir string) { e.Fatalf("Chdir(%s) is not supported in a run", dir) }

// Cleanup registers f for Close.
func (e *Env) Cleanup(f func()) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.cleanups = append(e.cleanups, f)
}

// Error records a failure and goes on.
func (e *Env) Error(args ...any) { e.Errorf("%s", fmt.Sprint(args...)) }

// Errorf records a failure and goes on.
func (e *Env) Errorf(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	klog.ErrorS(nil, msg, "run", e.name)
	e.mu.Lock()
	defer e.mu.Unlock()
	e.failed = true
	e.errs = append(e.errs, msg)
}

// Fail marks the run failed.
func (e *Env) Fail() { e.mu.Lock(); e.failed = true; e.mu.Unlock() }

// FailNow ends the run.
func (e *Env) FailNow() { panic(fatal{msg: e.name + " failed"}) }

// Failed reports whether something failed.
func (e *Env) Failed() bool { e.mu.Lock(); defer e.mu.Unlock(); return e.failed }

// Fatal ends the run with an error.
func (e *Env) Fatal(args ...any) { panic(fatal{msg: fmt.Sprint(args...)}) }

// Fatalf ends the run with an error.
func (e *Env) Fatalf(format string, args ...any) { panic(fatal{msg: fmt.Sprintf(format, args...)}) }

// Helper does nothing.
func (e *Env) Helper() {}

// Log goes to klog at verbosity 4 (the apiserver's chatter lands here).
func (e *Env) Log(args ...any) { klog.V(4).InfoS(fmt.Sprint(args...), "run", e.name) }

// Logf goes to klog at verbosity 4.
func (e *Env) Logf(format string, args ...any) {
	klog.V(4).InfoS(fmt.Sprintf(format, args...), "run", e.name)
}

// Name is the run's name.
func (e *Env) Name() string { return e.name }

// Setenv sets a variable until Close.
func (e *Env) Setenv(key, value string) {
	old, had := os.LookupEnv(key)
	_ = os.Setenv(key, value)
	e.Cleanup(func() {
		if had {
			_ = os.Setenv(key, old)
		} else {
			_ = os.Unsetenv(key)
		}
	})
}

// Skip is not supported outside tests.
func (e *Env) Skip(args ...any) { e.Fatal(args...) }

// Skipf is not supported outside tests.
func (e *Env) Skipf(format string, args ...any) { e.Fatalf(format, args...) }

// SkipNow is not supported outside tests.
func (e *Env) SkipNow() { e.Fatal("skipped") }

// Skipped is always false.
func (e *Env) Skipped() bool { return false }

// TempDir makes a directory removed at Close.
func (e *Env) TempDir() string {
	dir, err := os.MkdirTemp("", "nicaffinity-"+e.name+"-")
	if err != nil {
		e.Fatalf("temp dir: %v", err)
	}
	e.Cleanup(func() { _ = os.RemoveAll(dir) })
	return dir
}
