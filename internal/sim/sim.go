// Package sim replays a workload of GPU jobs on a simulated cluster (real
// control plane, real exporters, simulated kubelets) through one scheduler
// profile and reports what the jobs really got.
package sim

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand"
	"sort"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/yaml"

	"github.com/nicaffinity/nicaffinity/internal/cluster"
	"github.com/nicaffinity/nicaffinity/internal/controlplane"
	"github.com/nicaffinity/nicaffinity/internal/kubeletsim"
	"github.com/nicaffinity/nicaffinity/internal/runenv"
	"github.com/nicaffinity/nicaffinity/internal/schedulertest"
	"github.com/nicaffinity/nicaffinity/pkg/annotations"
	"github.com/nicaffinity/nicaffinity/pkg/profiles"
	"github.com/nicaffinity/nicaffinity/pkg/topology/sysfs/sysfstest"
)

// ClusterSpec is the cluster: pools of identical nodes.
type ClusterSpec struct {
	Pools []Pool `json:"pools"`
}

// Pool is count nodes of one machine: a fixture name (sysfstest.Machines,
// half-nics, h20-sriov) or "profile/<name>" for a bundled NCCL XML.
type Pool struct {
	Name    string `json:"name"`
	Count   int    `json:"count"`
	Machine string `json:"machine"`
}

// WorkloadSpec is the jobs to replay.
type WorkloadSpec struct {
	Jobs int `json:"jobs"`
	// Sizes weighs job sizes in GPUs ("1": 4 means four parts in the draw).
	Sizes map[string]int `json:"sizes"`
	// RDMAShare of jobs need a NIC (rdma/hca).
	RDMAShare float64 `json:"rdmaShare"`
	// Interarrival between job submissions; Duration bounds of a job's life.
	Interarrival metav1.Duration `json:"interarrival"`
	MinDuration  metav1.Duration `json:"minDuration"`
	MaxDuration  metav1.Duration `json:"maxDuration"`
	Seed         int64           `json:"seed"`
}

// Default specs: real shapes. HGX H100 (every GPU PIX to a NIC), DGX A100
// (PXB), Azure NDv2 (8 V100, one NIC for all: no GPUDirect anywhere) and an
// H20 with SR-IOV VFs; plus the half-NIC shape of the tests.
var (
	DefaultCluster = ClusterSpec{Pools: []Pool{
		{Name: "h100", Count: 2, Machine: "hgx-h100-8gpu-8nic"},
		{Name: "a100", Count: 1, Machine: "dgx-a100-8gpu-10nic"},
		{Name: "ndv2", Count: 1, Machine: "profile/azure-ndv2-v100-8gpu"},
		{Name: "half", Count: 2, Machine: "half-nics"},
	}}
	DefaultWorkload = WorkloadSpec{Jobs: 40, Sizes: map[string]int{"1": 4, "2": 3, "4": 2, "8": 1}, RDMAShare: 0.7,
		Interarrival: metav1.Duration{Duration: 250 * time.Millisecond}, MinDuration: metav1.Duration{Duration: 4 * time.Second},
		MaxDuration: metav1.Duration{Duration: 15 * time.Second}, Seed: 1}
)

// ParseCluster and ParseWorkload read YAML specs strictly.
func ParseCluster(b []byte) (ClusterSpec, error) {
	var c ClusterSpec
	if err := yaml.UnmarshalStrict(b, &c); err != nil {
		return c, fmt.Errorf("cluster spec: %w", err)
	}
	for i, p := range c.Pools {
		if p.Count <= 0 || p.Name == "" || p.Machine == "" {
			return c, fmt.Errorf("cluster spec: pools[%d]: want name, machine and a positive count", i)
		}
		if _, err := machine(p.Machine); err != nil {
			return c, fmt.Errorf("cluster spec: pools[%d]: %w", i, err)
		}
	}
	return c, nil
}

// ParseWorkload reads a workload spec.
func ParseWorkload(b []byte) (WorkloadSpec, error) {
	w := DefaultWorkload
	if err := yaml.UnmarshalStrict(b, &w); err != nil {
		return w, fmt.Errorf("workload spec: %w", err)
	}
	if w.Jobs <= 0 || w.RDMAShare < 0 || w.RDMAShare > 1 || w.MinDuration.Duration <= 0 || w.MaxDuration.Duration < w.MinDuration.Duration {
		return w, fmt.Errorf("workload spec: want jobs > 0, 0 <= rdmaShare <= 1, 0 < minDuration <= maxDuration")
	}
	for k, v := range w.Sizes {
		var n int
		if _, err := fmt.Sscanf(k, "%d", &n); err != nil || n <= 0 || v < 0 {
			return w, fmt.Errorf("workload spec: sizes: %q: %d is not a GPU count with a weight", k, v)
		}
	}
	return w, nil
}

func machine(name string) (cluster.NodeSpec, error) {
	if p, ok := strings.CutPrefix(name, "profile/"); ok {
		t, err := profiles.Load(p)
		if err != nil {
			return cluster.NodeSpec{}, err
		}
		return cluster.NodeSpec{Topology: t}, nil
	}
	for _, m := range sysfstest.Machines {
		if m.Name == name {
			return cluster.NodeSpec{Machine: m.Build}, nil
		}
	}
	switch name {
	case "half-nics":
		return cluster.NodeSpec{Machine: sysfstest.HalfNICs}, nil
	case "h20-sriov":
		return cluster.NodeSpec{Machine: sysfstest.H20SRIOV}, nil
	}
	var known []string
	for _, m := range sysfstest.Machines {
		known = append(known, m.Name)
	}
	return cluster.NodeSpec{}, fmt.Errorf("unknown machine %q (known: %s, half-nics, h20-sriov, profile/<name>)", name, strings.Join(known, ", "))
}

// Result is one scheduler's run.
type Result struct {
	Scheduler string `json:"scheduler"`
	Jobs      int    `json:"jobs"`
	Scheduled int    `json:"scheduled"`
	Pending   int    `json:"pending"`
	RDMAJobs  int    `json:"rdmaJobs"`
	// Levels counts the RDMA jobs that ran by the worst GPU-NIC level the
	// exporter observed.
	Levels map[string]int `json:"levels"`
	// GPUDirect is the share of RDMA jobs that ran with every GPU at PIX/PXB.
	GPUDirect    float64 `json:"gpuDirectShare"`
	LatencyP50Ms int64   `json:"latencyP50Ms"`
	LatencyP99Ms int64   `json:"latencyP99Ms"`
}

type job struct {
	name     string
	gpus     int64
	rdma     bool
	duration time.Duration
}

func (w WorkloadSpec) draw() []job {
	rng := rand.New(rand.NewSource(w.Seed))
	var sizes []int64
	for k, v := range w.Sizes {
		var n int64
		fmt.Sscanf(k, "%d", &n)
		for i := 0; i < v; i++ {
			sizes = append(sizes, n)
		}
	}
	sort.Slice(sizes, func(i, j int) bool { return sizes[i] < sizes[j] })
	var out []job
	for i := 0; i < w.Jobs; i++ {
		d := w.MinDuration.Duration + time.Duration(rng.Int63n(int64(w.MaxDuration.Duration-w.MinDuration.Duration)+1))
		out = append(out, job{name: fmt.Sprintf("job-%03d", i), gpus: sizes[rng.Intn(len(sizes))], rdma: rng.Float64() < w.RDMAShare, duration: d})
	}
	return out
}

// Run replays the workload through scheduler on a fresh cluster.
func Run(ctx context.Context, c ClusterSpec, w WorkloadSpec, scheduler string, progress io.Writer) (Result, error) {
	res := Result{Scheduler: scheduler, Levels: map[string]int{}}
	env := runenv.New(strings.Split(scheduler, "-")[0])
	defer env.Close()
	err := env.Run(func() {
		cp := controlplane.Start(env)
		var specs []cluster.NodeSpec
		for _, p := range c.Pools {
			for i := 0; i < p.Count; i++ {
				s, err := machine(p.Machine)
				if err != nil {
					env.Fatalf("%v", err)
				}
				s.Name, s.Policy = fmt.Sprintf("%s-%d", p.Name, i), kubeletsim.BestEffort
				specs = append(specs, s)
			}
		}
		cluster.Start(env, cp, cluster.DefaultOptions(), specs...)
		if _, err := cp.Kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "nicaffinity-system"}}, metav1.CreateOptions{}); err != nil {
			env.Fatalf("%v", err)
		}
		cfg, err := schedulertest.ShippedConfig()
		if err != nil {
			env.Fatalf("%v", err)
		}
		schedulertest.Start(env, cp, schedulertest.WithDefaultProfile(cfg))
		res = replay(ctx, cp, w.draw(), scheduler, w.Interarrival.Duration, progress)
	})
	return res, err
}

type outcome struct {
	ran      bool
	latency  time.Duration
	observed *annotations.Observed
}

func replay(ctx context.Context, cp *controlplane.ControlPlane, jobs []job, scheduler string, gap time.Duration, progress io.Writer) Result {
	res := Result{Scheduler: scheduler, Jobs: len(jobs), Levels: map[string]int{}}
	outcomes := make([]outcome, len(jobs))
	var wg sync.WaitGroup
	for i, j := range jobs {
		limits := corev1.ResourceList{"nvidia.com/gpu": *resource.NewQuantity(j.gpus, resource.DecimalSI)}
		if j.rdma {
			limits["rdma/hca"] = resource.MustParse("1")
			res.RDMAJobs++
		}
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: j.name, Namespace: "default"},
			Spec: corev1.PodSpec{SchedulerName: scheduler, Containers: []corev1.Container{{Name: "train", Image: "train",
				Resources: corev1.ResourceRequirements{Limits: limits, Requests: limits}}}}}
		start := time.Now()
		if _, err := cp.Kube.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
			fmt.Fprintf(progress, "  %s: %v\n", j.name, err)
			continue
		}
		wg.Add(1)
		go func(i int, j job) {
			defer wg.Done()
			outcomes[i] = follow(ctx, cp, j, start)
		}(i, j)
		if progress != nil && (i+1)%10 == 0 {
			fmt.Fprintf(progress, "  [%s] %d/%d jobs submitted\n", scheduler, i+1, len(jobs))
		}
		time.Sleep(gap)
	}
	wg.Wait()
	var lat []time.Duration
	for i, o := range outcomes {
		if !o.ran {
			res.Pending++
			continue
		}
		res.Scheduled++
		lat = append(lat, o.latency)
		if jobs[i].rdma && o.observed != nil {
			res.Levels[o.observed.Level]++
			if o.observed.Aligned {
				res.GPUDirect++
			}
		}
	}
	if ran := res.RDMAJobs; ran > 0 {
		res.GPUDirect /= float64(ran)
	}
	sort.Slice(lat, func(a, b int) bool { return lat[a] < lat[b] })
	if len(lat) > 0 {
		res.LatencyP50Ms = lat[len(lat)/2].Milliseconds()
		res.LatencyP99Ms = lat[min(len(lat)-1, len(lat)*99/100)].Milliseconds()
	}
	return res
}

// follow waits for a job to run (or gives up when its life would be over),
// reads what the exporter observed, and ends it after its duration.
func follow(ctx context.Context, cp *controlplane.ControlPlane, j job, start time.Time) outcome {
	var o outcome
	pods := cp.Kube.CoreV1().Pods("default")
	deadline := 30*time.Second + j.duration
	_ = wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, deadline, true, func(ctx context.Context) (bool, error) {
		p, err := pods.Get(ctx, j.name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		if p.Status.Phase == corev1.PodRunning && !o.ran {
			o.ran, o.latency = true, time.Since(start)
		}
		if v, ok := p.Annotations[annotations.ObservedKey]; ok && o.ran {
			var obs annotations.Observed
			if json.Unmarshal([]byte(v), &obs) == nil {
				o.observed = &obs
				return true, nil
			}
		}
		return false, nil
	})
	if o.ran {
		time.Sleep(max(0, j.duration-time.Since(start)))
	}
	_ = pods.Delete(ctx, j.name, metav1.DeleteOptions{})
	return o
}

// Format prints results side by side.
func Format(w io.Writer, results []Result) {
	fmt.Fprintf(w, "%-24s", "")
	for _, r := range results {
		fmt.Fprintf(w, "%24s", r.Scheduler)
	}
	fmt.Fprintln(w)
	row := func(name string, f func(Result) string) {
		fmt.Fprintf(w, "%-24s", name)
		for _, r := range results {
			fmt.Fprintf(w, "%24s", f(r))
		}
		fmt.Fprintln(w)
	}
	row("jobs scheduled", func(r Result) string { return fmt.Sprintf("%d/%d", r.Scheduled, r.Jobs) })
	row("jobs pending", func(r Result) string { return fmt.Sprint(r.Pending) })
	row("RDMA jobs", func(r Result) string { return fmt.Sprint(r.RDMAJobs) })
	for _, l := range []string{"PIX", "PXB", "PHB", "NODE", "SYS"} {
		row("  worst level "+l, func(r Result) string { return fmt.Sprint(r.Levels[l]) })
	}
	row("GPUDirect-eligible", func(r Result) string { return fmt.Sprintf("%.0f%%", 100*r.GPUDirect) })
	row("time to Running p50", func(r Result) string { return fmt.Sprintf("%dms", r.LatencyP50Ms) })
	row("time to Running p99", func(r Result) string { return fmt.Sprintf("%dms", r.LatencyP99Ms) })
}
