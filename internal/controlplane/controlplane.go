// Package controlplane starts a real kube-apiserver and etcd in-process for
// tests and the simulator, with nicaffinity's CRDs installed, and stops them
// when the test ends.
package controlplane

import (
	"context"
	"fmt"
	"io/fs"
	"net"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"reflect"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
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
	kubeapiservertesting "k8s.io/kubernetes/cmd/kube-apiserver/app/testing"
	"k8s.io/kubernetes/test/utils/ktesting"
	"sigs.k8s.io/yaml"

	"github.com/nicaffinity/nicaffinity/manifests"
)

// ControlPlane is a running apiserver with clients.
type ControlPlane struct {
	// Config is an admin rest config (protobuf for built-in types).
	Config *rest.Config
	Kube   kubernetes.Interface
	// NRT talks JSON, as CRDs need.
	NRT nrtclient.Interface
	// TmpDir is the apiserver's scratch directory, removed at stop.
	TmpDir string
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

// Start runs etcd and the apiserver for t (a test, or internal/runenv for the
// simulator), installs the CRDs under manifests/crds and waits until they are
// served. Everything stops at t's cleanup.
func Start(t ktesting.TB, opts ...Option) *ControlPlane {
	t.Helper()
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	if err := certFixtureWorkaround(); err != nil {
		t.Fatalf("kube-apiserver certificate directory: %v", err)
	}
	flags, err := o.authzFlags(t.TempDir())
	if err != nil {
		t.Fatalf("%v", err)
	}
	etcdURL := startEtcd(t)
	storage := storagebackend.NewDefaultConfig(fmt.Sprintf("/nicaffinity-%d", time.Now().UnixNano()), nil)
	storage.Transport.ServerList = []string{etcdURL}
	srv, err := kubeapiservertesting.StartTestServer(t,
		&kubeapiservertesting.TestServerInstanceOptions{DisableInvariantChecks: true},
		append([]string{"--endpoint-reconciler-type=none", "--disable-admission-plugins=ServiceAccount,TaintNodesByCondition"}, flags...),
		storage)
	if err != nil {
		t.Fatalf("starting kube-apiserver: %v", err)
	}
	t.Cleanup(srv.TearDownFn)
	cp := &ControlPlane{Config: srv.ClientConfig, TmpDir: srv.TmpDir}

	if cp.Kube, err = kubernetes.NewForConfig(srv.ClientConfig); err != nil {
		t.Fatalf("kube client: %v", err)
	}
	if cp.NRT, err = nrtclient.NewForConfig(JSONConfig(srv.ClientConfig)); err != nil {
		t.Fatalf("NRT client: %v", err)
	}
	if err := installCRDs(context.Background(), srv.ClientConfig); err != nil {
		t.Fatalf("installing CRDs: %v", err)
	}
	return cp
}

var (
	fixtureOnce sync.Once
	fixtureErr  error
)

// certFixtureWorkaround: kube-apiserver's test server keeps its self-signed
// certificates in the testdata directory beside its own source file, a path
// fixed when the binary was built (the Go module cache of the build
// machine). Where that directory is missing (nicaffinity run on a machine
// without that module cache, or built with -trimpath) the server cannot
// start. It honours Bazel's TEST_SRCDIR/TEST_WORKSPACE as a prefix of that
// path; point them at a directory of our own that holds it. Once per
// process: the variables are process-wide.
func certFixtureWorkaround() error {
	fixtureOnce.Do(func() {
		fn := runtime.FuncForPC(reflect.ValueOf(kubeapiservertesting.StartTestServer).Pointer())
		if fn == nil {
			fixtureErr = fmt.Errorf("cannot locate the test server's source path")
			return
		}
		src, _ := fn.FileLine(fn.Entry())
		dir := filepath.Dir(src)
		if filepath.IsAbs(dir) {
			if _, err := os.Stat(filepath.Join(dir, "testdata")); err == nil {
				return // built here: the server's own directory exists
			}
		}
		base, err := os.UserCacheDir()
		if err != nil {
			base = os.TempDir()
		}
		root := filepath.Join(base, "nicaffinity", "apiserver-certs")
		if err := os.MkdirAll(filepath.Join(root, "ws", dir, "testdata"), 0o700); err != nil {
			fixtureErr = err
			return
		}
		os.Setenv("TEST_SRCDIR", root)
		os.Setenv("TEST_WORKSPACE", "ws")
	})
	return fixtureErr
}

// startEtcd runs an embedded etcd on free ports in a temp dir until t's cleanup.
func startEtcd(t ktesting.TB) string {
	t.Helper()
	ports := make([]int, 2)
	for i := range ports {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatalf("finding a free port for etcd: %v", err)
		}
		ports[i] = l.Addr().(*net.TCPAddr).Port
		l.Close()
	}
	cfg := embed.NewConfig()
	cfg.UnsafeNoFsync = true
	client := url.URL{Scheme: "http", Host: net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[0]))}
	peer := url.URL{Scheme: "http", Host: net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[1]))}
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{client}, []url.URL{client}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{peer}, []url.URL{peer}
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.NewNop())
	cfg.Dir = t.TempDir()
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		t.Fatalf("starting etcd: %v", err)
	}
	t.Cleanup(e.Close)
	select {
	case <-e.Server.ReadyNotify():
	case <-time.After(60 * time.Second):
		e.Server.Stop()
		t.Fatalf("etcd took too long to start")
	}
	return client.String()
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
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["test"] = &clientcmdapi.Cluster{Server: c.Host, CertificateAuthorityData: c.CAData, CertificateAuthority: c.CAFile, TLSServerName: c.ServerName, InsecureSkipTLSVerify: c.Insecure}
	cfg.AuthInfos["test"] = &clientcmdapi.AuthInfo{Token: c.BearerToken, ClientCertificateData: c.CertData, ClientKeyData: c.KeyData}
	cfg.Contexts["test"] = &clientcmdapi.Context{Cluster: "test", AuthInfo: "test"}
	cfg.CurrentContext = "test"
	return clientcmd.WriteToFile(*cfg, path)
}
