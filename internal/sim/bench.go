package sim

import (
	"context"
	"fmt"
	"io"
	"sort"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/nicaffinity/nicaffinity/internal/controlplane"
	"github.com/nicaffinity/nicaffinity/internal/runenv"
	"github.com/nicaffinity/nicaffinity/internal/schedulertest"
	"github.com/nicaffinity/nicaffinity/pkg/nrt"
	"github.com/nicaffinity/nicaffinity/pkg/podresources"
	"github.com/nicaffinity/nicaffinity/pkg/topology/discovery"
	"github.com/nicaffinity/nicaffinity/pkg/topology/sysfs/sysfstest"
)

// BenchSpec is a scheduler_perf-style measurement.
type BenchSpec struct {
	Nodes int
	// Pods per batch; batches run A B B A (nicaffinity, default, default, nicaffinity).
	Pods int
}

// BenchResult is what one profile measured over its two batches.
type BenchResult struct {
	Scheduler    string  `json:"scheduler"`
	PodsPerSec   float64 `json:"podsPerSecond"`
	LatencyP50Ms float64 `json:"latencyP50Ms"`
	LatencyP99Ms float64 `json:"latencyP99Ms"`
}

// Bench runs the batches against one apiserver with Nodes HGX H100 nodes
// (Node objects and published NodeResourceTopology, no kubelets: only
// scheduling is measured) and returns both profiles and the throughput ratio
// nicaffinity / default.
func Bench(ctx context.Context, spec BenchSpec, progress io.Writer) ([]BenchResult, float64, error) {
	var results []BenchResult
	ratio := 0.0
	env := runenv.New("bench")
	defer env.Close()
	err := env.Run(func() {
		cp := controlplane.Start(env)
		if err := populate(ctx, cp, spec.Nodes, env.TempDir(), progress); err != nil {
			env.Fatalf("%v", err)
		}
		if _, err := cp.Kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "nicaffinity-system"}}, metav1.CreateOptions{}); err != nil {
			env.Fatalf("%v", err)
		}
		cfg, err := schedulertest.ShippedConfig()
		if err != nil {
			env.Fatalf("%v", err)
		}
		// As scheduler_perf does: lift the client's rate limit, so the
		// measurement is the scheduler's work, not 50 requests a second.
		cfg = strings.Replace(cfg, "kind: KubeSchedulerConfiguration\n", "kind: KubeSchedulerConfiguration\nclientConnection:\n  qps: 5000\n  burst: 5000\n", 1)
		schedulertest.Start(env, cp, schedulertest.WithDefaultProfile(cfg))
		per := map[string]*batchTotals{}
		for i, s := range []string{"nicaffinity-scheduler", "default-scheduler", "default-scheduler", "nicaffinity-scheduler"} {
			b, err := runBatch(ctx, cp, s, fmt.Sprintf("b%d", i), spec.Pods)
			if err != nil {
				env.Fatalf("batch %d (%s): %v", i, s, err)
			}
			if progress != nil {
				fmt.Fprintf(progress, "  batch %d %-22s %6.0f pods/s\n", i+1, s, float64(spec.Pods)/b.elapsed.Seconds())
			}
			if per[s] == nil {
				per[s] = &batchTotals{}
			}
			per[s].elapsed += b.elapsed
			per[s].pods += spec.Pods
			per[s].latencies = append(per[s].latencies, b.latencies...)
		}
		for _, s := range []string{"nicaffinity-scheduler", "default-scheduler"} {
			t := per[s]
			sort.Slice(t.latencies, func(a, b int) bool { return t.latencies[a] < t.latencies[b] })
			results = append(results, BenchResult{Scheduler: s, PodsPerSec: float64(t.pods) / t.elapsed.Seconds(),
				LatencyP50Ms: ms(t.latencies[len(t.latencies)/2]), LatencyP99Ms: ms(t.latencies[min(len(t.latencies)-1, len(t.latencies)*99/100)])})
		}
		ratio = results[0].PodsPerSec / results[1].PodsPerSec
	})
	return results, ratio, err
}

type batchTotals struct {
	elapsed   time.Duration
	pods      int
	latencies []time.Duration
}

type batch struct {
	elapsed   time.Duration
	latencies []time.Duration
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// populate creates n GPU nodes with the HGX H100 shape's object.
func populate(ctx context.Context, cp *controlplane.ControlPlane, n int, dir string, progress io.Writer) error {
	tree := sysfstest.New(dir)
	sysfstest.HGXH100(tree)
	if err := tree.Err(); err != nil {
		return err
	}
	topo, err := discovery.Host{SysfsRoot: tree.Root, NVMLMode: discovery.NVMLOff}.Discover()
	if err != nil {
		return err
	}
	var offered []podresources.Device
	for _, g := range topo.GPUs {
		offered = append(offered, podresources.Device{Resource: "nvidia.com/gpu", ID: g.PCI.Address})
	}
	res := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("192"), corev1.ResourceMemory: resource.MustParse("2Ti"),
		corev1.ResourcePods: resource.MustParse("110"), "nvidia.com/gpu": resource.MustParse("8"), "rdma/hca": resource.MustParse("100")}
	sem := make(chan struct{}, 16)
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := 0; i < n; i++ {
		wg.Add(1)
		sem <- struct{}{}
		go func(i int) {
			defer wg.Done()
			defer func() { <-sem }()
			name := fmt.Sprintf("gpu-%05d", i)
			obj, _ := nrt.Build(nrt.Input{Node: name, Topology: topo, Snapshot: podresources.Snapshot{Allocatable: offered}, Resources: nrt.DefaultResources()})
			if _, err := cp.NRT.TopologyV1alpha2().NodeResourceTopologies().Create(ctx, obj, metav1.CreateOptions{}); err != nil {
				errs <- err
				return
			}
			node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"kubernetes.io/hostname": name}},
				Status: corev1.NodeStatus{Capacity: res, Allocatable: res, Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}}}
			if _, err := cp.Kube.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{}); err != nil {
				errs <- err
			}
		}(i)
		if progress != nil && (i+1)%500 == 0 {
			fmt.Fprintf(progress, "  %d/%d nodes\n", i+1, n)
		}
	}
	wg.Wait()
	close(errs)
	return <-errs
}

// runBatch creates pods 1-GPU RDMA pods for scheduler and measures until all are bound.
func runBatch(ctx context.Context, cp *controlplane.ControlPlane, scheduler, prefix string, pods int) (batch, error) {
	var b batch
	pc := cp.Kube.CoreV1().Pods("default")
	w, err := pc.Watch(ctx, metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("spec.schedulerName", scheduler).String()})
	if err != nil {
		return b, err
	}
	defer w.Stop()
	created := make(map[string]time.Time, pods)
	var mu sync.Mutex
	start := time.Now()
	go func() {
		for i := 0; i < pods; i++ {
			limits := corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("1"), "rdma/hca": resource.MustParse("1")}
			p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s-%05d", prefix, i), Namespace: "default"},
				Spec: corev1.PodSpec{SchedulerName: scheduler, Containers: []corev1.Container{{Name: "c", Image: "c",
					Resources: corev1.ResourceRequirements{Limits: limits, Requests: limits}}}}}
			mu.Lock()
			created[p.Name] = time.Now()
			mu.Unlock()
			_, _ = pc.Create(ctx, p, metav1.CreateOptions{})
		}
	}()
	bound := map[string]bool{}
	timeout := time.After(time.Duration(pods)*50*time.Millisecond + time.Minute)
	for len(bound) < pods {
		select {
		case ev, ok := <-w.ResultChan():
			if !ok {
				return b, fmt.Errorf("watch closed after %d of %d pods", len(bound), pods)
			}
			p, isPod := ev.Object.(*corev1.Pod)
			if !isPod || ev.Type == watch.Deleted || p.Spec.NodeName == "" || bound[p.Name] {
				continue
			}
			bound[p.Name] = true
			mu.Lock()
			b.latencies = append(b.latencies, time.Since(created[p.Name]))
			mu.Unlock()
		case <-timeout:
			return b, fmt.Errorf("only %d of %d pods bound", len(bound), pods)
		}
	}
	b.elapsed = time.Since(start)
	// Clear the batch so every batch sees the same cluster.
	if err := pc.DeleteCollection(ctx, metav1.DeleteOptions{GracePeriodSeconds: new(int64)}, metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("spec.schedulerName", scheduler).String()}); err != nil {
		return b, err
	}
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		l, err := pc.List(ctx, metav1.ListOptions{})
		return err == nil && len(l.Items) == 0, nil
	})
	return b, err
}
