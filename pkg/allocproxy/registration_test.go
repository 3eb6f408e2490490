package allocproxy

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/client-go/tools/record"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

// newRegistrationProxy is a proxy with a real kubelet registration server
// in its kubelet directory, not running its loop: registrations are made
// by calling its registration server.
func newRegistrationProxy(t *testing.T, mutate func(*Config)) (*Proxy, *registration, *record.FakeRecorder) {
	t.Helper()
	base := t.TempDir()
	cfg := Config{KubeletDir: filepath.Join(base, "k"), VendorDir: filepath.Join(base, "v"), Timeout: 200 * time.Millisecond,
		CallTimeout: 200 * time.Millisecond, NodeName: "node-a"}
	if mutate != nil {
		mutate(&cfg)
	}
	for _, d := range []string{cfg.KubeletDir, cfg.VendorDir} {
		if err := os.MkdirAll(d, 0o750); err != nil {
			t.Fatal(err)
		}
	}
	startKubelet(t, cfg.KubeletDir)
	events := record.NewFakeRecorder(10)
	p := New(cfg, &testPlans{}, nil, events, nil)
	t.Cleanup(func() {
		p.mu.Lock()
		defer p.mu.Unlock()
		for _, f := range p.fronts {
			f.stop()
		}
	})
	return p, &registration{p: p}, events
}

func register(r *registration, resource, endpoint string) error {
	_, err := r.Register(context.Background(), &pluginapi.RegisterRequest{Version: pluginapi.Version, ResourceName: resource, Endpoint: endpoint})
	return err
}

// TestFrontSocketsCollisionFree: names that read alike once "/" and "."
// become "_" get sockets of their own, and both resources stay fronted.
func TestFrontSocketsCollisionFree(t *testing.T) {
	if a, b := FrontSocket("nvidia.com/gpu"), FrontSocket("nvidia/com.gpu"); a == b {
		t.Fatalf("nvidia.com/gpu and nvidia/com.gpu share the socket %s", a)
	}
	if s := FrontSocket("example.com/" + strings.Repeat("x", 240)); len(s) > 80 {
		t.Errorf("socket name of %d bytes for a long resource name", len(s))
	}
	p, r, _ := newRegistrationProxy(t, nil)
	for _, res := range []string{"nvidia.com/gpu", "nvidia/com.gpu"} {
		if err := register(r, res, "vendor.sock"); err != nil {
			t.Fatalf("%s: %v", res, err)
		}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.fronts) != 2 || p.fronts["nvidia.com/gpu"].socket == p.fronts["nvidia/com.gpu"].socket {
		t.Fatalf("fronts %v: want two, on two sockets", p.fronts)
	}
	for _, f := range p.fronts {
		if _, err := os.Stat(f.socket); err != nil {
			t.Errorf("%s: socket %v", f.resource, err)
		}
	}
}

// TestRegistrationRefusals: names the kubelet would refuse are refused,
// and past the cap a new resource is refused with a metric and an Event on
// the Node, while a fronted resource may still register again.
func TestRegistrationRefusals(t *testing.T) {
	p, r, events := newRegistrationProxy(t, func(c *Config) { c.MaxFronts = 2 })
	for _, tc := range []struct{ resource, endpoint, want string }{
		{"nvidia.com/gpu\x00evil", "v.sock", "not an extended resource name"},
		{"gpu", "v.sock", "not an extended resource name"},
		{"kubernetes.io/gpu", "v.sock", "not an extended resource name"},
		{"requests.example.com/gpu", "v.sock", "not an extended resource name"},
		{"example.com/" + strings.Repeat("x", 250), "v.sock", "not an extended resource name"},
		{"example.com/gpu", "../kubelet.sock", "endpoint"},
		{"example.com/gpu", "", "endpoint"},
	} {
		if err := register(r, tc.resource, tc.endpoint); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q at %q: %v, want a refusal saying %q", tc.resource, tc.endpoint, err, tc.want)
		}
	}
	if got := testutil.ToFloat64(p.metrics.Registrations.WithLabelValues("vendor", "refused")); got != 7 {
		t.Errorf("refused registrations counted: %v, want 7", got)
	}
	for _, res := range []string{"example.com/a", "example.com/b"} {
		if err := register(r, res, "v.sock"); err != nil {
			t.Fatalf("%s: %v", res, err)
		}
	}
	err := register(r, "example.com/c", "v.sock")
	if status.Code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), "already fronts 2 resources") {
		t.Errorf("past the cap: %v, want ResourceExhausted", err)
	}
	if err := register(r, "example.com/a", "v2.sock"); err != nil {
		t.Errorf("a fronted resource registering again at the cap: %v", err)
	}
	if got := testutil.ToFloat64(p.metrics.Registrations.WithLabelValues("vendor", "over-cap")); got != 1 {
		t.Errorf("over-cap registrations: %v, want 1", got)
	}
	if got := testutil.ToFloat64(p.metrics.Fronts); got != 2 {
		t.Errorf("fronts gauge %v, want 2", got)
	}
	select {
	case e := <-events.Events:
		if !strings.Contains(e, "RegistrationRefused") || !strings.Contains(e, "example.com/c") {
			t.Errorf("event %q", e)
		}
	default:
		t.Error("no Event for the refused registration")
	}
}

// hungVendor answers nothing until its caller gives up.
type hungVendor struct {
	pluginapi.UnimplementedDevicePluginServer
}

func (hungVendor) GetDevicePluginOptions(ctx context.Context, _ *pluginapi.Empty) (*pluginapi.DevicePluginOptions, error) {
	<-ctx.Done()
	return nil, ctx.Err()
}

func (hungVendor) ListAndWatch(_ *pluginapi.Empty, s grpc.ServerStreamingServer[pluginapi.ListAndWatchResponse]) error {
	<-s.Context().Done()
	return s.Context().Err()
}

func (hungVendor) Allocate(ctx context.Context, _ *pluginapi.AllocateRequest) (*pluginapi.AllocateResponse, error) {
	<-ctx.Done()
	return nil, ctx.Err()
}

func (hungVendor) PreStartContainer(ctx context.Context, _ *pluginapi.PreStartContainerRequest) (*pluginapi.PreStartContainerResponse, error) {
	<-ctx.Done()
	return nil, ctx.Err()
}

// fakeStream is the kubelet's side of a ListAndWatch stream.
type fakeStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (s fakeStream) Context() context.Context                   { return s.ctx }
func (s fakeStream) Send(*pluginapi.ListAndWatchResponse) error { return nil }

// TestForwardedCallDeadlines: every call forwarded to a vendor that hangs
// returns once CallTimeout passes, although the kubelet's own context has
// no deadline, and says it ran out of time.
func TestForwardedCallDeadlines(t *testing.T) {
	p, r, _ := newRegistrationProxy(t, nil)
	sock := filepath.Join(p.cfg.VendorDir, "hung.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	pluginapi.RegisterDevicePluginServer(srv, hungVendor{})
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(srv.Stop)
	if err := register(r, "example.com/gpu", "hung.sock"); err != nil {
		t.Fatal(err)
	}
	p.mu.Lock()
	front := &frontServer{f: p.fronts["example.com/gpu"]}
	p.mu.Unlock()
	ctx := context.Background()
	for name, call := range map[string]func() error{
		"GetDevicePluginOptions": func() error { _, err := front.GetDevicePluginOptions(ctx, &pluginapi.Empty{}); return err },
		"Allocate":               func() error { _, err := front.Allocate(ctx, &pluginapi.AllocateRequest{}); return err },
		"PreStartContainer": func() error {
			_, err := front.PreStartContainer(ctx, &pluginapi.PreStartContainerRequest{})
			return err
		},
		"ListAndWatch": func() error { return front.ListAndWatch(&pluginapi.Empty{}, fakeStream{ctx: ctx}) },
	} {
		done := make(chan error, 1)
		go func() { done <- call() }()
		select {
		case err := <-done:
			if status.Code(err) != codes.DeadlineExceeded && status.Code(err) != codes.Canceled {
				t.Errorf("%s: %v, want the deadline's error", name, err)
			}
		case <-time.After(10 * time.Second): // a hang guard, far above the 0.2 s deadline
			t.Fatalf("%s outlived its deadline", name)
		}
	}
}

// TestRegistrationAfterRun: once Run has returned, a registration still
// reaching the proxy (its handler started before the server stopped) is
// refused and leaves no front socket in the kubelet's directory, and the
// fronts Run served are gone.
func TestRegistrationAfterRun(t *testing.T) {
	p, r, _ := newRegistrationProxy(t, func(c *Config) { c.Poll = 10 * time.Millisecond })
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	if err := register(r, "nvidia.com/gpu", "vendor.sock"); err != nil {
		t.Fatalf("registration while running: %v", err)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run: %v", err)
	}
	err := register(r, "example.com/nic", "nic.sock")
	if status.Code(err) != codes.Unavailable {
		t.Errorf("registration after Run: %v, want Unavailable", err)
	}
	entries, err := os.ReadDir(p.cfg.KubeletDir)
	if err != nil {
		t.Fatal(err)
	}
	var left []string
	for _, e := range entries {
		if e.Name() != filepath.Base(pluginapi.KubeletSocket) {
			left = append(left, e.Name())
		}
	}
	if len(left) != 0 {
		t.Errorf("left in the kubelet's directory after Run: %v", left)
	}
}

// TestServeAgainNeverSeesAServeHalfDone: Run's loop serves a front anew
// when its socket is gone. During a reconnect (the vendor's options
// changed) the socket must never look gone: serve removes it before it
// listens again, so the loop checks under the front's lock; and the
// listener of the server the reconnect stopped must not unlink the new
// socket when it closes late (it closes when its Serve goroutine runs,
// which may be after the stop). A check that saw the socket gone would
// serve a second time, without the reconnect's hold, and register while
// the kubelet may still be connected. Only reconnects run here, so the
// loop's check must never serve. Each of the two faults failed this test
// on most runs.
func TestServeAgainNeverSeesAServeHalfDone(t *testing.T) {
	p, r, _ := newRegistrationProxy(t, nil)
	if err := register(r, "nvidia.com/gpu", "vendor.sock"); err != nil {
		t.Fatal(err)
	}
	p.mu.Lock()
	f := p.fronts["nvidia.com/gpu"]
	p.mu.Unlock()
	done := make(chan error, 1)
	go func() {
		for range 300 {
			if err := f.reconnect(); err != nil {
				done <- err
				return
			}
		}
		done <- nil
	}()
	for served := 0; ; {
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("reconnect: %v", err)
			}
			if served > 0 {
				t.Fatalf("Run's check served the front %d times during reconnects; want none", served)
			}
			return
		default:
		}
		s, err := f.serveAgain(false)
		if err != nil {
			t.Fatalf("serveAgain: %v", err)
		}
		if s {
			served++
		}
	}
}
