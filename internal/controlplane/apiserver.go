package controlplane

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"github.com/spf13/pflag"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilerrors "k8s.io/apimachinery/pkg/util/errors"
	"k8s.io/apiserver/pkg/storage/storagebackend"
	"k8s.io/apiserver/pkg/util/compatibility"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	basecompatibility "k8s.io/component-base/compatibility"
	logsapi "k8s.io/component-base/logs/api/v1"
	"k8s.io/kubernetes/cmd/kube-apiserver/app"
	apiserveroptions "k8s.io/kubernetes/cmd/kube-apiserver/app/options"
)

func init() {
	// Several apiservers in one process (parallel tests and replays) would
	// each re-apply the process's logging configuration; unchanged
	// settings are fine.
	logsapi.ReapplyHandling = logsapi.ReapplyHandlingIgnoreUnchanged
}

// apiServer is a running kube-apiserver: kube-apiserver's own options,
// config and server chain (cmd/kube-apiserver/app), started on a loopback
// port with self-signed certificates in dir, every failure returned.
type apiServer struct {
	config *rest.Config
	cancel context.CancelFunc
	done   chan error
}

// startAPIServer starts kube-apiserver on storage with the given extra
// flags and waits until it serves (healthz, the default namespace).
func startAPIServer(ctx context.Context, dir string, flags []string, storage *storagebackend.Config) (*apiServer, error) {
	// Each server has its own registry of component versions and feature
	// gates (a copy of the process's), so that servers do not contend on
	// the process-wide one.
	gate := utilfeature.DefaultMutableFeatureGate.DeepCopy()
	version := compatibility.DefaultKubeEffectiveVersionForTest()
	version.SetEmulationVersion(gate.EmulationVersion())
	version.SetMinCompatibilityVersion(gate.MinCompatibilityVersion())
	registry := basecompatibility.NewComponentGlobalsRegistry()
	if err := registry.Register(basecompatibility.DefaultKubeComponent, version, gate); err != nil {
		return nil, err
	}
	s := apiserveroptions.NewServerRunOptions()
	s.GenericServerRunOptions.ComponentGlobalsRegistry = registry
	fs := pflag.NewFlagSet("kube-apiserver", pflag.ContinueOnError)
	for _, f := range s.Flags().FlagSets {
		fs.AddFlagSet(f)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("listening on a loopback port: %w", err)
	}
	s.SecureServing.Listener, s.SecureServing.BindPort = l, l.Addr().(*net.TCPAddr).Port
	s.SecureServing.ExternalAddress = l.Addr().(*net.TCPAddr).IP
	s.SecureServing.ServerCert.CertDirectory = dir
	s.ServiceClusterIPRanges = "10.0.0.0/16"
	s.Etcd.StorageConfig = *storage
	if err := fs.Parse(flags); err != nil {
		l.Close()
		return nil, fmt.Errorf("kube-apiserver flags %q: %w", flags, err)
	}
	if err := registry.Set(); err != nil {
		l.Close()
		return nil, err
	}
	key, err := serviceAccountKey(dir)
	if err != nil {
		l.Close()
		return nil, err
	}
	s.ServiceAccountSigningKeyFile = key
	s.Authentication.ServiceAccounts.Issuers = []string{"https://nicaffinity.invalid"}
	s.Authentication.ServiceAccounts.KeyFiles = []string{key}

	ctx, cancel := context.WithCancel(ctx)
	fail := func(err error) (*apiServer, error) {
		cancel()
		l.Close()
		return nil, err
	}
	completed, err := s.Complete(ctx)
	if err != nil {
		return fail(fmt.Errorf("completing kube-apiserver options: %w", err))
	}
	if errs := completed.Validate(); len(errs) != 0 {
		return fail(fmt.Errorf("kube-apiserver options: %w", utilerrors.NewAggregate(errs)))
	}
	config, err := app.NewConfig(completed)
	if err != nil {
		return fail(err)
	}
	cc, err := config.Complete()
	if err != nil {
		return fail(err)
	}
	server, err := app.CreateServerChain(cc)
	if err != nil {
		return fail(fmt.Errorf("kube-apiserver server chain: %w", err))
	}
	a := &apiServer{cancel: cancel, done: make(chan error, 1)}
	go func() {
		prepared, err := server.PrepareRun()
		if err == nil {
			err = prepared.Run(ctx)
		}
		a.done <- err
		close(a.done)
	}()
	a.config = rest.CopyConfig(server.GenericAPIServer.LoopbackClientConfig)
	a.config.QPS, a.config.Burst = 1000, 10000
	if err := a.waitServing(ctx); err != nil {
		a.stop()
		return nil, err
	}
	return a, nil
}

// waitServing waits for /healthz and the default namespace, or the
// server's own error.
func (a *apiServer) waitServing(ctx context.Context) error {
	client, err := kubernetes.NewForConfig(a.config)
	if err != nil {
		return err
	}
	deadline := time.Now().Add(90 * time.Second)
	// readyz: every post-start hook finished and the server's own
	// readiness checks pass. A server stopped while a hook still runs (the
	// service IP repair's first pass) has that hook fail, and
	// kube-apiserver then exits the whole process (klog.Fatalf in
	// runPostStartHook); that was seen once in a replay. healthz lists the
	// hooks too, so how a server came to be stopped that early is not
	// known: readyz is the stricter wait, not a proven fix.
	for what := "readyz"; ; {
		switch what {
		case "readyz":
			status := 0
			client.CoreV1().RESTClient().Get().AbsPath("/readyz").Do(ctx).StatusCode(&status)
			if status == http.StatusOK {
				what = "the default namespace"
				continue
			}
		default:
			if _, err := client.CoreV1().Namespaces().Get(ctx, "default", metav1.GetOptions{}); err == nil {
				return nil
			}
		}
		select {
		case err := <-a.done:
			if err == nil {
				err = errors.New("stopped")
			}
			return fmt.Errorf("kube-apiserver stopped before it served: %w", err)
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("kube-apiserver: no %s within 90 s", what)
		}
	}
}

// stop stops the server and waits for it.
func (a *apiServer) stop() error {
	a.cancel()
	return <-a.done
}

// serviceAccountKey writes a fresh ECDSA key for service-account tokens.
func serviceAccountKey(dir string) (string, error) {
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return "", err
	}
	der, err := x509.MarshalECPrivateKey(k)
	if err != nil {
		return "", err
	}
	path := filepath.Join(dir, "service-account.key")
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der}), 0o600); err != nil {
		return "", err
	}
	return path, nil
}
