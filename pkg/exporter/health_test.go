package exporter

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/k8stopologyawareschedwg/noderesourcetopology-api/pkg/apis/topology/v1alpha2"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/nicaffinity/nicaffinity/pkg/devices"
	"github.com/nicaffinity/nicaffinity/pkg/machines"
	"github.com/nicaffinity/nicaffinity/pkg/nrt"
	"github.com/nicaffinity/nicaffinity/pkg/topology"
	"github.com/nicaffinity/nicaffinity/pkg/topology/discovery"
)

// blockingPublisher never returns until its context ends, as an apiserver
// that accepts the connection and never answers.
type blockingPublisher struct{}

func (blockingPublisher) Publish(ctx context.Context, _ *v1alpha2.NodeResourceTopology) error {
	<-ctx.Done()
	return ctx.Err()
}

// TestHealthFollowsSyncs: with a publisher that hangs, every sync ends at
// SyncTimeout, and health and readiness fail once three resync periods
// pass without a successful sync; Run still returns at once on
// cancellation.
func TestHealthFollowsSyncs(t *testing.T) {
	disc, topo := h20(t)
	_, src := startKubelet(t, []devices.Device{gpu(topo, 0)})
	cfg := DefaultConfig("n1")
	cfg.ResyncPeriod, cfg.SyncTimeout, cfg.MinWriteInterval, cfg.MaxBackoff = time.Minute, 20*time.Millisecond, 10*time.Millisecond, 20*time.Millisecond
	exp := New(cfg, disc, src, newFakeKube(), blockingPublisher{}, nil)
	var clock atomic.Int64
	clock.Store(time.Now().UnixNano())
	exp.now = func() time.Time { return time.Unix(0, clock.Load()) }
	exp.started.Store(clock.Load())
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- exp.Run(ctx) }()
	if err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		return testutilCount(exp, "error") >= 2, nil
	}); err != nil {
		t.Fatalf("syncs against a hung publisher never timed out: %v", err)
	}
	if err := exp.Healthy(); err != nil || exp.Ready() {
		t.Errorf("before 3 resync periods: healthy %v, ready %v; want healthy, not ready (nothing published)", err, exp.Ready())
	}
	clock.Add(int64(3*time.Minute + time.Second))
	if err := exp.Healthy(); err == nil || !strings.Contains(err.Error(), "no successful sync in the 3m1s since the start") {
		t.Errorf("after 3 resync periods: %v, want a failure naming how long", err)
	}
	cancel()
	select {
	case <-done:
	case <-time.After(time.Second):
		t.Fatal("Run did not return within 1 s of cancellation")
	}
}

// TestRunReturnsWhileDiscoveryHangs: discovery (NVML, sysfs) takes no
// context; a hung one neither holds Run past cancellation nor starts a
// second discovery beside it.
func TestRunReturnsWhileDiscoveryHangs(t *testing.T) {
	_, topo := h20(t)
	_, src := startKubelet(t, []devices.Device{gpu(topo, 0)})
	hang := make(chan struct{})
	defer close(hang)
	var calls atomic.Int32
	disc := DiscovererFunc(func() (*topology.Topology, error) {
		calls.Add(1)
		<-hang
		return topo, nil
	})
	cfg := DefaultConfig("n1")
	cfg.SyncTimeout, cfg.MinWriteInterval, cfg.MaxBackoff = 20*time.Millisecond, 10*time.Millisecond, 20*time.Millisecond
	exp := New(cfg, disc, src, newFakeKube(), &memoryPublisher{}, nil)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- exp.Run(ctx) }()
	if err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		return testutilCount(exp, "error") >= 3, nil
	}); err != nil {
		t.Fatalf("syncs never failed while discovery hung: %v", err)
	}
	cancel()
	select {
	case <-done:
	case <-time.After(time.Second):
		t.Fatal("Run did not return within 1 s of cancellation while discovery hung")
	}
	if n := calls.Load(); n != 1 {
		t.Errorf("%d discoveries started, want 1 (the hung one)", n)
	}
}

func testutilCount(exp *Exporter, result string) float64 {
	return testutil.ToFloat64(exp.Metrics().Publishes.WithLabelValues(result))
}

// TestHeartbeat: every write carries the time it was made; content alone
// decides whether a sync writes, and the resync's Forget renews it.
func TestHeartbeat(t *testing.T) {
	disc, topo := h20(t)
	_, src := startKubelet(t, []devices.Device{gpu(topo, 0)})
	pub := &memoryPublisher{}
	exp := New(DefaultConfig("n1"), disc, src, newFakeKube(), pub, nil)
	at := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	exp.now = func() time.Time { return at }
	beat := func() string {
		for _, a := range pub.last().Attributes {
			if a.Name == nrt.AttrHeartbeat {
				return a.Value
			}
		}
		return "none"
	}
	ctx := t.Context()
	if err := exp.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	if got := beat(); got != "2026-12-01T12:00:00Z" {
		t.Errorf("first write: heartbeat %s", got)
	}
	at = at.Add(30 * time.Second)
	if err := exp.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	if got := beat(); got != "2026-12-01T12:00:00Z" {
		t.Errorf("unchanged content rewritten: heartbeat %s", got)
	}
	exp.Forget() // what the resync tick does
	if err := exp.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	if got := beat(); got != "2026-12-01T12:00:30Z" {
		t.Errorf("after the resync: heartbeat %s, want 2026-12-01T12:00:30Z", got)
	}
}

// FuzzVerify: whatever devices the kubelet reports and whatever
// annotations a pod carries (a tenant writes some of them), Verify ends
// quickly without a panic.
func FuzzVerify(f *testing.F) {
	f.Add("nvidia.com/gpu", "0000:19:00.0", "rdma/hca", "hca", `{"node":"n1","gpus":["0000:19:00.0"]}`, "PIX", "true")
	f.Add("openshift.io/sriov_highnet", "0000:b8:00.2", "nvidia.com/gpu", "GPU-0", "{", "NV", "")
	f.Add("nvidia.com/gpu", "", "", "", `{"node":"n1","gpus":[`+strings.Repeat(`"x",`, 1000)+`"y"]}`, "", "false")
	tree := sysfsH20(f)
	v := NewVerifier("n1", tree, nrt.DefaultResources(), []string{"rdma/"}, topology.LevelPXB)
	f.Fuzz(func(t *testing.T, res1, id1, res2, id2, plan, level, rdma string) {
		start := time.Now()
		v.Verify(PodView{Namespace: "d", Name: "p",
			Devices:     []devices.Device{{Resource: res1, ID: id1}, {Resource: res2, ID: id2}},
			Annotations: map[string]string{"nicaffinity.io/allocation": plan, "nicaffinity.io/max-level": level, "nicaffinity.io/rdma": rdma}})
		if took := time.Since(start); took > time.Second {
			t.Fatalf("Verify took %s", took)
		}
	})
}

// sysfsH20 is h20's topology for a fuzz target (testing.F is no *testing.T).
func sysfsH20(f *testing.F) *topology.Topology {
	tree := machines.New(f.TempDir())
	machines.H20(tree)
	if err := tree.Err(); err != nil {
		f.Fatal(err)
	}
	topo, err := discovery.Host{SysfsRoot: tree.Root, NVMLMode: discovery.NVMLOff}.Discover()
	if err != nil {
		f.Fatal(err)
	}
	return topo
}
