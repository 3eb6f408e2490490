// Package controlplane starts a real kube-apiserver and etcd in-process for
// tests and the simulator, with nicaffinity's CRDs installed, and stops them
// when the test ends.
package controlplane

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	neturl "net/url"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/server/v3/embed"
	"go.etcd.io/etcd/server/v3/etcdserver"
	"go.etcd.io/etcd/server/v3/storage/mvcc"
	"go.uber.org/zap"

	nrtclient "github.com/k8stopologyawareschedwg/noderesourcetopology-api/pkg/generated/clientset/versioned"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextensionsclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apiserver/pkg/storage/storagebackend"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/kubernetes/test/utils/ktesting"
	"sigs.k8s.io/yaml"

	"github.com/nicaffinity/nicaffinity/internal/memapi"
	"github.com/nicaffinity/nicaffinity/manifests"
	"github.com/nicaffinity/nicaffinity/pkg/exporter"
)

// ControlPlane is a running apiserver with clients.
type ControlPlane struct {
	// Config is an admin rest config (protobuf for built-in types).
	Config *rest.Config
	Kube   kubernetes.Interface
	// NRT talks JSON, as CRDs need.
	NRT nrtclient.Interface
	// TmpDir is the control plane's scratch directory (etcd's data, the
	// apiserver's certificates), removed at Stop.
	TmpDir string
	// Memory is the in-memory API when the control plane has no
	// apiserver (NewInMemory); Config is nil then.
	Memory *memapi.API

	mu    sync.Mutex
	stops []func()
	etcd  *etcdserver.EtcdServer
}

// JSONConfig returns a copy of cfg that talks JSON, which CRD types need.
func JSONConfig(cfg *rest.Config) *rest.Config {
	c := rest.CopyConfig(cfg)
	c.ContentType = "application/json"
	c.AcceptContentTypes = "application/json"
	return c
}

// Option changes how the control plane starts.
type Option func(*options)

type options struct {
	authz  bool
	tokens []StaticToken
	flags  []string
}

// WithWorkloads serves the workload APIs (scheduling.k8s.io/v1beta1:
// PodGroup, Workload) and turns on the GenericWorkload gate, as a cluster
// that gang-schedules jobs needs: the apiserver accepts pods'
// spec.schedulingGroup and PodGroups only then.
func WithWorkloads() Option {
	return func(o *options) {
		o.flags = append(o.flags, "--feature-gates=GenericWorkload=true", "--runtime-config=scheduling.k8s.io/v1beta1=true")
	}
}

// StaticToken is a user that authenticates with a fixed bearer token (the
// apiserver's --token-auth-file): a kubelet's node identity, the default
// scheduler, an operator.
type StaticToken struct {
	Token, User string
	Groups      []string
}

// WithAuthorization runs the apiserver as a production cluster does, with
// the Node and RBAC authorizers and the NodeRestriction admission plugin
// (instead of allowing every request), and accepts the given static tokens
// besides service-account tokens. The admin client (Config) stays in
// system:masters.
func WithAuthorization(tokens ...StaticToken) Option {
	return func(o *options) { o.authz, o.tokens = true, tokens }
}

// authzFlags are the apiserver flags of WithAuthorization, with the token
// file written in dir.
func (o *options) authzFlags(dir string) ([]string, error) {
	if !o.authz {
		return nil, nil
	}
	var b strings.Builder
	for i, tok := range o.tokens {
		fmt.Fprintf(&b, "%s,%s,uid-%d,%q\n", tok.Token, tok.User, i, strings.Join(tok.Groups, ","))
	}
	file := filepath.Join(dir, "tokens.csv")
	if err := os.WriteFile(file, []byte(b.String()), 0o600); err != nil {
		return nil, fmt.Errorf("writing the token file: %w", err)
	}
	return []string{"--authorization-mode=Node,RBAC", "--enable-admission-plugins=NodeRestriction", "--token-auth-file=" + file}, nil
}

// New runs etcd and the apiserver, installs the CRDs under manifests/crds
// and waits until they are served. Stop stops everything.
func New(ctx context.Context, opts ...Option) (*ControlPlane, error) {
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	dir, err := os.MkdirTemp("", "nicaffinity-apiserver")
	if err != nil {
		return nil, err
	}
	cp := &ControlPlane{TmpDir: dir}
	cp.stops = append(cp.stops, func() { os.RemoveAll(dir) })
	fail := func(err error) (*ControlPlane, error) {
		cp.Stop()
		return nil, err
	}
	flags, err := o.authzFlags(dir)
	if err != nil {
		return fail(err)
	}
	e, err := startEtcd(filepath.Join(dir, "etcd"))
	if err != nil {
		return fail(err)
	}
	cp.stops = append(cp.stops, e.Close)
	cp.etcd = e.Server
	etcdURL := e.Config().AdvertiseClientUrls[0].String()
	storage := storagebackend.NewDefaultConfig(fmt.Sprintf("/nicaffinity-%d", time.Now().UnixNano()), nil)
	storage.Transport.ServerList = []string{etcdURL}
	certs := filepath.Join(dir, "apiserver")
	if err := os.MkdirAll(certs, 0o700); err != nil {
		return fail(err)
	}
	flags = append(flags, o.flags...)
	srv, err := startAPIServer(ctx, certs, append([]string{"--endpoint-reconciler-type=none", "--disable-admission-plugins=ServiceAccount,TaintNodesByCondition"}, flags...), storage)
	if err != nil {
		return fail(fmt.Errorf("starting kube-apiserver: %w", err))
	}
	cp.stops = append(cp.stops, func() { _ = srv.stop() })
	cp.Config = srv.config
	if cp.Kube, err = kubernetes.NewForConfig(cp.Config); err != nil {
		return fail(fmt.Errorf("kube client: %w", err))
	}
	if cp.NRT, err = nrtclient.NewForConfig(JSONConfig(cp.Config)); err != nil {
		return fail(fmt.Errorf("NRT client: %w", err))
	}
	if err := installCRDs(ctx, cp.Config); err != nil {
		return fail(fmt.Errorf("installing CRDs: %w", err))
	}
	return cp, nil
}

// NewInMemory serves the API from memory (package memapi) instead of
// kube-apiserver and etcd: the replays' control plane. Config is nil;
// clients come from Memory (Kube and NRT are ready).
func NewInMemory(opts ...memapi.Option) (*ControlPlane, error) {
	dir, err := os.MkdirTemp("", "nicaffinity-memapi")
	if err != nil {
		return nil, err
	}
	api, err := memapi.New(opts...)
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	cp := &ControlPlane{TmpDir: dir, Memory: api, Kube: api.Kube(), NRT: api.NRT()}
	cp.stops = append(cp.stops, func() { os.RemoveAll(dir) }, api.Close)
	return cp, nil
}

// ExporterClient is a client for one exporter: over HTTP to the
// apiserver, or on the in-memory API.
func (cp *ControlPlane) ExporterClient() (ExporterClient, error) {
	if cp.Memory != nil {
		return cp.Memory.Exporter(), nil
	}
	return exporter.NewClient(cp.Config)
}

// ExporterClient is what an exporter writes and reads through.
type ExporterClient interface {
	exporter.Kube
	exporter.NRTClient
}

// Stop stops the apiserver and etcd and removes their files, last started
// first; it may be called more than once.
func (cp *ControlPlane) Stop() {
	cp.mu.Lock()
	stops := cp.stops
	cp.stops = nil
	cp.mu.Unlock()
	for i := len(stops) - 1; i >= 0; i-- {
		stops[i]()
	}
}

// Start is New for a test: it stops at the test's cleanup, and a failure
// fails the test.
func Start(t ktesting.TB, opts ...Option) *ControlPlane {
	t.Helper()
	cp, err := New(context.Background(), opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cp.Stop)
	return cp
}

// CompactStorage compacts etcd's history up to its current revision, as
// the apiserver does every five minutes: a benchmark calls it between
// batches, so that every batch starts on storage holding only live keys
// rather than on all the revisions the batches before it wrote.
func (cp *ControlPlane) CompactStorage(ctx context.Context) error {
	rev := cp.etcd.KV().Rev()
	_, err := cp.etcd.Compact(ctx, &etcdserverpb.CompactionRequest{Revision: rev, Physical: true})
	if errors.Is(err, mvcc.ErrCompacted) {
		return nil // the apiserver's own compaction came first
	}
	if err != nil {
		return fmt.Errorf("compacting etcd to revision %d: %w", rev, err)
	}
	return nil
}

// startEtcd runs an embedded etcd on free ports in dir; Close stops it.
func startEtcd(dir string) (*embed.Etcd, error) {
	ports := make([]int, 2)
	for i := range ports {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("finding a free port for etcd: %w", err)
		}
		ports[i] = l.Addr().(*net.TCPAddr).Port
		l.Close()
	}
	cfg := embed.NewConfig()
	cfg.UnsafeNoFsync = true
	client := neturl.URL{Scheme: "http", Host: net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[0]))}
	peer := neturl.URL{Scheme: "http", Host: net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[1]))}
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []neturl.URL{client}, []neturl.URL{client}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []neturl.URL{peer}, []neturl.URL{peer}
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.NewNop())
	cfg.Dir = dir
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		return nil, fmt.Errorf("starting etcd: %w", err)
	}
	select {
	case <-e.Server.ReadyNotify():
	case <-time.After(60 * time.Second):
		e.Close()
		return nil, fmt.Errorf("etcd took too long to start")
	}
	return e, nil
}

func installCRDs(ctx context.Context, cfg *rest.Config) error {
	ext, err := apiextensionsclient.NewForConfig(cfg)
	if err != nil {
		return err
	}
	files, err := fs.Glob(manifests.CRDs, "crds/*.yaml")
	if err != nil {
		return err
	}
	var names []string
	for _, f := range files {
		if path.Base(f) == "kustomization.yaml" {
			continue
		}
		b, err := fs.ReadFile(manifests.CRDs, f)
		if err != nil {
			return err
		}
		for _, doc := range strings.Split(string(b), "\n---") {
			if strings.TrimSpace(doc) == "" {
				continue
			}
			crd := &apiextensionsv1.CustomResourceDefinition{}
			if err := yaml.UnmarshalStrict([]byte(doc), crd); err != nil {
				return fmt.Errorf("%s: %w", f, err)
			}
			if _, err := ext.ApiextensionsV1().CustomResourceDefinitions().Create(ctx, crd, metav1.CreateOptions{}); err != nil {
				return fmt.Errorf("%s: creating CRD %s: %w", f, crd.Name, err)
			}
			names = append(names, crd.Name)
		}
	}
	for _, name := range names {
		err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
			crd, err := ext.ApiextensionsV1().CustomResourceDefinitions().Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return false, nil
			}
			for _, c := range crd.Status.Conditions {
				if c.Type == apiextensionsv1.Established && c.Status == apiextensionsv1.ConditionTrue {
					return true, nil
				}
			}
			return false, nil
		})
		if err != nil {
			return fmt.Errorf("CRD %s not established: %w", name, err)
		}
	}
	return nil
}

// WriteKubeconfig writes a kubeconfig for the admin client to path, for
// components started from files (the scheduler, the exporter binary).
func (cp *ControlPlane) WriteKubeconfig(path string) error {
	c := cp.Config
	if c == nil {
		// In memory: every client comes from Memory; a client built from
		// this file would reach nothing.
		c = &rest.Config{Host: "https://in-memory.invalid"}
	}
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["test"] = &clientcmdapi.Cluster{Server: c.Host, CertificateAuthorityData: c.CAData, CertificateAuthority: c.CAFile, TLSServerName: c.ServerName, InsecureSkipTLSVerify: c.Insecure}
	cfg.AuthInfos["test"] = &clientcmdapi.AuthInfo{Token: c.BearerToken, ClientCertificateData: c.CertData, ClientKeyData: c.KeyData}
	cfg.Contexts["test"] = &clientcmdapi.Context{Cluster: "test", AuthInfo: "test"}
	cfg.CurrentContext = "test"
	return clientcmd.WriteToFile(*cfg, path)
}
