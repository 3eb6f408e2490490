package schedulerrun

import (
	"context"
	"sync/atomic"

	"k8s.io/apimachinery/pkg/runtime"
	fwk "k8s.io/kube-scheduler/framework"
	frameworkruntime "k8s.io/kubernetes/pkg/scheduler/framework/runtime"

	"github.com/nicaffinity/nicaffinity/pkg/plugins/nicaffinity"
)

// pluginRef keeps the plugin instance the framework builds, so that a
// harness can read its store's versions.
type pluginRef struct {
	p atomic.Pointer[nicaffinity.NICAffinity]
}

func (r *pluginRef) capture(f frameworkruntime.PluginFactory) frameworkruntime.PluginFactory {
	return func(ctx context.Context, obj runtime.Object, h fwk.Handle) (fwk.Plugin, error) {
		p, err := f(ctx, obj, h)
		if pl, ok := p.(*nicaffinity.NICAffinity); ok && err == nil {
			r.p.Store(pl)
		}
		return p, err
	}
}

func (r *pluginRef) get() *nicaffinity.NICAffinity { return r.p.Load() }
