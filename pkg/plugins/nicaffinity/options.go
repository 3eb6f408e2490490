package nicaffinity

import (
	"context"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/dynamic"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/utils/clock"
)

// Option sets what a harness may change in one plugin instance: no
// globals, so two profiles or two schedulers in one process never share.
type Option func(*options)

type options struct {
	clock clock.WithDelayedExecution
	// objects, when set, is where NodeResourceTopology objects are read
	// instead of a client built from the scheduler's kubeconfig.
	objects dynamic.Interface
}

// WithClock sets the clock the bounded policy's waits run on: the real
// clock by default, the replay's virtual clock in the simulator (so its
// figures follow from workload time alone), a fake one in tests.
func WithClock(c clock.WithDelayedExecution) Option {
	return func(o *options) { o.clock = c }
}

// WithObjectClient reads NodeResourceTopology objects through c instead
// of a client built from the scheduler's kubeconfig: a replay's in-memory
// API, which serves the resource from the start (no CRD to wait for).
func WithObjectClient(c dynamic.Interface) Option {
	return func(o *options) { o.objects = c }
}

func newOptions(opts []Option) options {
	o := options{clock: clock.RealClock{}}
	for _, f := range opts {
		f(&o)
	}
	return o
}

// Factory is New with options, as a plugin factory for a registry
// (frameworkruntime.PluginFactory).
func Factory(opts ...Option) func(context.Context, runtime.Object, fwk.Handle) (fwk.Plugin, error) {
	return func(ctx context.Context, obj runtime.Object, h fwk.Handle) (fwk.Plugin, error) {
		return newPlugin(ctx, obj, h, newOptions(opts))
	}
}
