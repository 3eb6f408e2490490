// Package schedulerrun runs the real kube-scheduler with the nicaffinity
// plugin in-process, from the KubeSchedulerConfiguration shipped in manifests/.
//
// Run builds the scheduler from the same options and server code as
// kube-scheduler's app.Setup, so that a harness can pass what only the
// scheduler's own constructor accepts (Options): the simulator's virtual
// time runs on that (settle.go). Every failure is returned as an error; tests
// wrap Run with Start.
package schedulerrun

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	utilerrors "k8s.io/apimachinery/pkg/util/errors"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/events"
	"k8s.io/component-base/configz"
	"k8s.io/klog/v2"
	"k8s.io/kubernetes/cmd/kube-scheduler/app"
	schedulerserverconfig "k8s.io/kubernetes/cmd/kube-scheduler/app/config"
	"k8s.io/kubernetes/cmd/kube-scheduler/app/options"
	"k8s.io/kubernetes/pkg/scheduler"
	schedulerapi "k8s.io/kubernetes/pkg/scheduler/apis/config"
	"k8s.io/kubernetes/pkg/scheduler/apis/config/latest"
	frameworkruntime "k8s.io/kubernetes/pkg/scheduler/framework/runtime"
	"k8s.io/kubernetes/pkg/scheduler/profile"
	"k8s.io/kubernetes/test/utils/ktesting"
	"sigs.k8s.io/yaml"

	"github.com/nicaffinity/nicaffinity/internal/controlplane"
	"github.com/nicaffinity/nicaffinity/internal/memapi"
	"github.com/nicaffinity/nicaffinity/manifests"
	"github.com/nicaffinity/nicaffinity/pkg/plugins/nicaffinity"
)

// ShippedConfig returns the KubeSchedulerConfiguration of manifests/scheduler-config.yaml.
func ShippedConfig() (string, error) {
	var cm corev1.ConfigMap
	if err := yaml.UnmarshalStrict(manifests.SchedulerConfigMap, &cm); err != nil {
		return "", err
	}
	cfg, ok := cm.Data["scheduler-config.yaml"]
	if !ok {
		return "", fmt.Errorf("ConfigMap %s has no scheduler-config.yaml", cm.Name)
	}
	return cfg, nil
}

// WithDefaultProfile adds a profile with the default plugins under the
// name default-scheduler, for side-by-side comparisons.
func WithDefaultProfile(cfg string) string {
	return cfg + "- schedulerName: default-scheduler\n"
}

// Edit decodes a KubeSchedulerConfiguration, lets f change it as a
// generic document, and encodes it again (comments are lost).
func Edit(cfg string, f func(doc map[string]any) error) (string, error) {
	var doc map[string]any
	if err := yaml.Unmarshal([]byte(cfg), &doc); err != nil {
		return "", err
	}
	if err := f(doc); err != nil {
		return "", err
	}
	b, err := yaml.Marshal(doc)
	return string(b), err
}

// Options is what a harness passes beyond the configuration file.
type Options struct {
	// Plugins are registered besides NICAffinity (the simulator's
	// tie-break).
	Plugins frameworkruntime.Registry
	// Profiles changes the completed configuration before the scheduler is
	// built (after defaulting, so every profile lists its default plugins).
	Profiles func(*schedulerapi.KubeSchedulerConfiguration) error
	// Scheduler options are passed to scheduler.New after the
	// configuration's own, so they win.
	Scheduler []scheduler.Option
	// Settle makes the scheduler a harness's to step: it pops a pod only
	// when the harness allows (Scheduler.Step), and the harness can tell
	// when every informer handler has caught up (settle.go).
	Settle bool
	// Hold starts the scheduler held: no pod gets past the gate after
	// the queue's pop until Release (hold.go).
	Hold bool
	// PluginOptions are passed to NICAffinity (the simulator's virtual
	// clock).
	PluginOptions []nicaffinity.Option
}

// Scheduler is a running scheduler.
type Scheduler struct {
	// Sched is the scheduler itself (its queue and cache).
	Sched *scheduler.Scheduler
	// Plugin is the nicaffinity-scheduler profile's plugin instance, once
	// built (nil for a configuration without it).
	plugin  pluginRef
	settle  *settler
	hold    *holdGate
	ctx     context.Context
	cancel  context.CancelFunc
	done    chan struct{}
	stopped sync.Once
	runErr  chan error
}

// Run starts the scheduler with cfg (a KubeSchedulerConfiguration; its
// clientConnection is pointed at cp; dir holds its files) until Stop or
// ctx ends. Leader election is turned off: kube-scheduler exits the process
// when it stops leading, which a test cannot survive (run the binary to test
// election).
func Run(ctx context.Context, cp *controlplane.ControlPlane, cfg, dir string, o Options) (*Scheduler, error) {
	cfg = strings.Replace(cfg, "leaderElect: true", "leaderElect: false", 1)
	kubeconfig := filepath.Join(dir, "kubeconfig")
	if err := cp.WriteKubeconfig(kubeconfig); err != nil {
		return nil, err
	}
	if strings.Contains(cfg, "\nclientConnection:\n") {
		cfg = strings.Replace(cfg, "\nclientConnection:\n", "\nclientConnection:\n  kubeconfig: "+kubeconfig+"\n", 1)
	} else {
		cfg = strings.Replace(cfg, "kind: KubeSchedulerConfiguration\n", "kind: KubeSchedulerConfiguration\nclientConnection:\n  kubeconfig: "+kubeconfig+"\n", 1)
	}
	path := filepath.Join(dir, "scheduler-config.yaml")
	if err := os.WriteFile(path, []byte(cfg), 0o644); err != nil {
		return nil, err
	}
	opts := options.NewOptions()
	opts.ConfigFile = path
	opts.SecureServing.BindPort = 0
	opts.SecureServing.ServerCert.CertDirectory = dir
	ctx, cancel := context.WithCancel(ctx)
	s := &Scheduler{ctx: ctx, cancel: cancel, done: make(chan struct{}), runErr: make(chan error, 1)}
	cc, err := s.setup(ctx, opts, o, cp.Memory)
	if err != nil {
		cancel()
		return nil, fmt.Errorf("scheduler setup: %w", err)
	}
	// kube-scheduler registers its configuration under one process-wide
	// configz name as it starts, and refuses to run when the name is taken.
	// Schedulers of parallel tests and replays start one at a time: each
	// frees the name once it has registered (nothing here serves /configz).
	configzMu.Lock()
	go func() {
		defer close(s.done)
		s.runErr <- app.Run(ctx, cc, s.Sched)
	}()
	registered := false
	for deadline := time.Now().Add(30 * time.Second); !registered && time.Now().Before(deadline); {
		select {
		case err := <-s.runErr:
			configzMu.Unlock()
			cancel()
			return nil, fmt.Errorf("scheduler stopped as it started: %w", err)
		case <-time.After(5 * time.Millisecond):
			registered = configzRegistered()
		}
	}
	configz.Delete(configzName)
	configzMu.Unlock()
	if !registered {
		cancel()
		<-s.done
		return nil, errors.New("scheduler did not start within 30 s")
	}
	return s, nil
}

// Err is the scheduler's error if it stopped on its own, nil while it runs
// or after Stop.
func (s *Scheduler) Err() error {
	select {
	case err := <-s.runErr:
		s.runErr <- err
		return err
	default:
		return nil
	}
}

// Stop stops the scheduler and waits for it (a scheduler restart).
func (s *Scheduler) Stop() {
	s.stopped.Do(func() {
		s.cancel()
		if s.settle != nil {
			s.settle.close()
		}
		<-s.done
	})
}

// setup is kube-scheduler's app.Setup with the harness's options: the same
// defaulting, validation, completed configuration and constructor, plus
// what only scheduler.New accepts.
func (s *Scheduler) setup(ctx context.Context, opts *options.Options, o Options, mem *memapi.API) (*schedulerserverconfig.CompletedConfig, error) {
	cfg, err := latest.Default()
	if err != nil {
		return nil, err
	}
	opts.ComponentConfig = cfg
	if errs := opts.Validate(); len(errs) > 0 {
		return nil, utilerrors.NewAggregate(errs)
	}
	c, err := opts.Config(ctx)
	if err != nil {
		return nil, err
	}
	if mem != nil {
		// The in-memory API: the clients app.Setup built from the
		// kubeconfig give way to clients of the store, built the same way.
		c.Client = mem.Kube()
		c.EventBroadcaster = events.NewEventBroadcasterAdapterWithContext(ctx, c.Client)
		c.InformerFactory = scheduler.NewInformerFactory(c.Client, 0, nil)
		objects := mem.Dynamic()
		c.DynInformerFactory = dynamicinformer.NewFilteredDynamicSharedInformerFactory(objects, 0, corev1.NamespaceAll, nil)
		o.PluginOptions = append(slices.Clone(o.PluginOptions), nicaffinity.WithObjectClient(objects))
	}
	cc := c.Complete()
	if o.Profiles != nil {
		if err := o.Profiles(&cc.ComponentConfig); err != nil {
			return nil, err
		}
	}
	registry := frameworkruntime.Registry{nicaffinity.Name: s.plugin.capture(nicaffinity.Factory(o.PluginOptions...))}
	for name, f := range o.Plugins {
		if err := registry.Register(name, f); err != nil {
			return nil, err
		}
	}
	if o.Settle {
		s.settle = newSettler()
		// The scheduler's pod and NodeResourceTopology informers are the
		// harness's to watch: every handler the scheduler (and its plugins)
		// registers on them reports what it has processed.
		f := informers.NewSharedInformerFactory(cc.Client, 0)
		s.settle.trackPods(f)
		s.settle.trackPodGroups(f)
		cc.InformerFactory = f
		cc.DynInformerFactory = s.settle.trackDynamic(cc.DynInformerFactory)
	}
	var recorders profile.RecorderFactory = func(name string) events.EventRecorderLogger { return cc.EventBroadcaster.NewRecorder(name) }
	all := append([]scheduler.Option{
		scheduler.WithComponentConfigVersion(cc.ComponentConfig.TypeMeta.APIVersion),
		scheduler.WithKubeConfig(cc.KubeConfig),
		scheduler.WithProfiles(cc.ComponentConfig.Profiles...),
		scheduler.WithPercentageOfNodesToScore(cc.ComponentConfig.PercentageOfNodesToScore),
		scheduler.WithFrameworkOutOfTreeRegistry(registry),
		scheduler.WithPodMaxBackoffSeconds(cc.ComponentConfig.PodMaxBackoffSeconds),
		scheduler.WithPodInitialBackoffSeconds(cc.ComponentConfig.PodInitialBackoffSeconds),
		scheduler.WithPodMaxInUnschedulablePodsDuration(cc.PodMaxInUnschedulablePodsDuration),
		scheduler.WithExtenders(cc.ComponentConfig.Extenders...),
		scheduler.WithParallelism(cc.ComponentConfig.Parallelism),
	}, o.Scheduler...)
	sched, err := scheduler.New(ctx, cc.Client, cc.InformerFactory, cc.DynInformerFactory, recorders, all...)
	if err != nil {
		return nil, err
	}
	s.Sched = sched
	if s.settle != nil {
		if err := s.settle.attach(sched); err != nil {
			return nil, err
		}
	}
	if o.Hold {
		if o.Settle {
			return nil, errors.New("Options.Hold and Options.Settle both gate the scheduling loop: choose one")
		}
		s.hold = &holdGate{}
		if err := s.hold.attach(sched, ctx.Done()); err != nil {
			return nil, err
		}
	}
	klog.FromContext(ctx).V(2).Info("Scheduler built", "profiles", len(cc.ComponentConfig.Profiles))
	return &cc, nil
}

// Start runs the scheduler with cfg until the test ends and returns a func
// that stops it early (a scheduler restart). A scheduler that stops on its
// own while the test runs fails the test.
func Start(t ktesting.TB, cp *controlplane.ControlPlane, cfg string) (stop func()) {
	t.Helper()
	return Started(t, cp, cfg).Stop
}

// Started is Start for a test that also reads the scheduler's state (its
// plugin's objects, PluginObjects).
func Started(t ktesting.TB, cp *controlplane.ControlPlane, cfg string) *Scheduler {
	t.Helper()
	s, err := Run(context.Background(), cp, cfg, t.TempDir(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		<-s.done
		// A scheduler that stops while the test still wants it fails the test.
		if err := s.Err(); err != nil && s.ctx.Err() == nil {
			t.Errorf("scheduler stopped: %v", err)
		}
	}()
	t.Cleanup(s.Stop)
	return s
}

// configzName is the name kube-scheduler registers its configuration under.
const configzName = "componentconfig"

var configzMu sync.Mutex

// configzRegistered reads the process's configz registry through its own
// handler (the package has no other way to look).
func configzRegistered() bool {
	mux := http.NewServeMux()
	configz.InstallHandler(mux)
	rec := httptest.NewRecorder()
	mux.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, configz.DefaultConfigzPath, nil))
	return strings.Contains(rec.Body.String(), `"`+configzName+`"`)
}
