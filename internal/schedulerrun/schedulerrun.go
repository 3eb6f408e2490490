// Package schedulerrun runs the real kube-scheduler with the nicaffinity
// plugin in-process, from the KubeSchedulerConfiguration shipped in manifests/.
package schedulerrun

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/component-base/configz"
	"k8s.io/kubernetes/cmd/kube-scheduler/app"
	"k8s.io/kubernetes/cmd/kube-scheduler/app/options"
	"sigs.k8s.io/yaml"

	"k8s.io/kubernetes/test/utils/ktesting"

	"github.com/nicaffinity/nicaffinity/internal/controlplane"
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

// Start runs the scheduler with cfg (a KubeSchedulerConfiguration; its
// clientConnection is pointed at cp) until the test ends. Leader election is
// turned off: kube-scheduler exits the process when it stops leading, which a
// test cannot survive (run the binary to test election). The returned func
// stops it early (a scheduler restart).
func Start(t ktesting.TB, cp *controlplane.ControlPlane, cfg string) (stop func()) {
	t.Helper()
	cfg = strings.Replace(cfg, "leaderElect: true", "leaderElect: false", 1)
	dir := t.TempDir()
	kubeconfig := filepath.Join(dir, "kubeconfig")
	if err := cp.WriteKubeconfig(kubeconfig); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(cfg, "\nclientConnection:\n") {
		cfg = strings.Replace(cfg, "\nclientConnection:\n", "\nclientConnection:\n  kubeconfig: "+kubeconfig+"\n", 1)
	} else {
		cfg = strings.Replace(cfg, "kind: KubeSchedulerConfiguration\n", "kind: KubeSchedulerConfiguration\nclientConnection:\n  kubeconfig: "+kubeconfig+"\n", 1)
	}
	path := filepath.Join(dir, "scheduler-config.yaml")
	if err := os.WriteFile(path, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	opts := options.NewOptions()
	opts.ConfigFile = path
	opts.SecureServing.BindPort = 0
	opts.SecureServing.ServerCert.CertDirectory = dir
	ctx, cancel := context.WithCancel(context.Background())
	cc, sched, err := app.Setup(ctx, opts, app.WithPlugin(nicaffinity.Name, nicaffinity.New))
	if err != nil {
		cancel()
		t.Fatalf("scheduler setup: %v", err)
	}
	// kube-scheduler registers its configuration under one process-wide
	// configz name as it starts, and refuses to run when the name is taken.
	// Schedulers of parallel tests and replays start one at a time: each
	// frees the name once it has registered (nothing here serves /configz).
	configzMu.Lock()
	done := make(chan struct{})
	runErr := make(chan error, 1)
	go func() {
		defer close(done)
		runErr <- app.Run(ctx, cc, sched)
	}()
	registered := false
	for deadline := time.Now().Add(30 * time.Second); !registered && time.Now().Before(deadline); {
		select {
		case err := <-runErr:
			configzMu.Unlock()
			cancel()
			t.Fatalf("scheduler stopped as it started: %v", err)
		case <-time.After(5 * time.Millisecond):
			registered = configzRegistered()
		}
	}
	configz.Delete(configzName)
	configzMu.Unlock()
	if !registered {
		cancel()
		<-done
		t.Fatalf("scheduler did not start within 30 s")
	}
	go func() {
		// A scheduler that stops while the test still wants it fails the test.
		if err := <-runErr; err != nil && ctx.Err() == nil {
			t.Errorf("scheduler stopped: %v", err)
		}
	}()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			<-done
		})
	}
	t.Cleanup(stop)
	return stop
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
