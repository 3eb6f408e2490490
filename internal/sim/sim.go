// Package sim replays a workload of GPU jobs on a simulated cluster (real
// control plane, real exporters, simulated kubelets) through one scheduler
// profile and reports what the jobs really got.
package sim

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"

	"github.com/nicaffinity/nicaffinity/internal/cluster"
	"github.com/nicaffinity/nicaffinity/internal/controlplane"
	"github.com/nicaffinity/nicaffinity/internal/kubeletsim"
	"github.com/nicaffinity/nicaffinity/internal/runenv"
	"github.com/nicaffinity/nicaffinity/internal/schedulerrun"
	"github.com/nicaffinity/nicaffinity/pkg/annotations"
	"github.com/nicaffinity/nicaffinity/pkg/dra"
	"github.com/nicaffinity/nicaffinity/pkg/machines"
	"github.com/nicaffinity/nicaffinity/pkg/topology"
)

// Schedulers are the two profiles every simulation compares.
var Schedulers = []string{"nicaffinity-scheduler", "default-scheduler"}

// Column is one run of a simulation: a scheduler profile, and what the
// nodes' kubelets do with its plans.
type Column struct {
	Name      string `json:"name"`
	Scheduler string `json:"scheduler"`
	// Kubelet is the simulated kubelet's GPU policy: kubeletsim.BestEffort
	// is the NVIDIA device plugin alone (a plan is advice), kubeletsim.Proxy
	// puts nicaffinity's allocation proxy in front of it.
	Kubelet string `json:"kubelet"`
	// Policy is nicaffinity's policy for every job (the nicaffinity.io/policy
	// annotation); empty for the default scheduler.
	Policy string `json:"policy,omitempty"`
	// Claims is how a DRA column's jobs claim devices (ClaimsGenerated,
	// ClaimsPCIeRoot, ClaimsUnconstrained); empty with device plugins.
	Claims string `json:"claims,omitempty"`
}

// Columns are the runs every simulation compares, on the same workload: the
// policies with the allocation proxy (so that placements happen), the
// required policy as advice to the device plugin alone, and the default
// scheduler, which the report compares each with. The default scheduler
// is last.
var Columns = []Column{
	{Name: "required+proxy", Scheduler: Schedulers[0], Kubelet: kubeletsim.Proxy, Policy: annotations.PolicyRequired},
	{Name: "preferred+proxy", Scheduler: Schedulers[0], Kubelet: kubeletsim.Proxy, Policy: annotations.PolicyPreferred},
	{Name: "required (advice)", Scheduler: Schedulers[0], Kubelet: kubeletsim.BestEffort, Policy: annotations.PolicyRequired},
	{Name: "default-scheduler", Scheduler: Schedulers[1], Kubelet: kubeletsim.BestEffort},
}

// ColumnsNamed picks columns by name, in Columns then DRAColumns order.
func ColumnsNamed(names []string) ([]Column, error) {
	var known []string
	var cols []Column
	for _, c := range slices.Concat(Columns, DRAColumns) {
		known = append(known, c.Name)
		if slices.Contains(names, c.Name) {
			cols = append(cols, c)
		}
	}
	for _, n := range names {
		if !slices.Contains(known, n) {
			return nil, fmt.Errorf("no column %q (known: %s)", n, strings.Join(known, ", "))
		}
	}
	return cols, nil
}

// Plan is a simulation ready to run: the nodes resolved, the jobs laid out
// in time, and the offline bound computed.
type Plan struct {
	Cluster  ClusterSpec
	Workload WorkloadSpec
	nodes    []cluster.NodeSpec
	info     []nodeInfo
	machines []dra.Machine // one per pool
	jobs     []job
	bound    Bound
}

// Prepare resolves every pool's machine (building the bundled sysfs shapes
// once to read their topology) and checks the workload fits the cluster.
func Prepare(c ClusterSpec, w WorkloadSpec) (*Plan, error) {
	p := &Plan{Cluster: c, Workload: w}
	dir, err := os.MkdirTemp("", "nicaffinity-sim")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	for i, pool := range c.Pools {
		spec, err := pool.node()
		if err != nil {
			return nil, fmt.Errorf("pool %s: %w", pool.Name, err)
		}
		topo := spec.Topology
		if spec.Machine != nil {
			if topo, err = machines.Discover(fmt.Sprintf("%s/%d", dir, i), spec.Machine); err != nil {
				return nil, fmt.Errorf("pool %s: %w", pool.Name, err)
			}
		}
		p.machines = append(p.machines, dra.Machine{Name: pool.machineName(), Topology: topo})
		for k := 0; k < pool.Count; k++ {
			s := spec
			s.Name, s.Policy = fmt.Sprintf("%s-%d", pool.Name, k), kubeletsim.BestEffort
			p.nodes = append(p.nodes, s)
			p.info = append(p.info, describe(s.Name, topo))
		}
	}
	if err := w.check(p.info); err != nil {
		return nil, err
	}
	p.jobs = w.draw(p.GPUs())
	p.bound = offlineBound(p.jobs, p.info)
	return p, nil
}

// Nodes is the cluster's node count.
func (p *Plan) Nodes() int { return len(p.info) }

// GPUs is the cluster's GPU count.
func (p *Plan) GPUs() int {
	n := 0
	for _, i := range p.info {
		n += len(i.GPUs)
	}
	return n
}

// AlignedGPUs is how many GPUs have a PIX/PXB RDMA NIC.
func (p *Plan) AlignedGPUs() int {
	n := 0
	for _, i := range p.info {
		n += i.alignedCount()
	}
	return n
}

// Bound is the offline bound of the plan's workload on its cluster.
func (p *Plan) Bound() Bound { return p.bound }

// Jobs is the number of jobs.
func (p *Plan) Jobs() int { return len(p.jobs) }

// Progress is a run's state, reported about twice a second.
type Progress struct {
	Scheduler                                string
	Elapsed                                  time.Duration
	Jobs, Submitted, Waiting, Running, Ended int
}

// minWriteInterval is the shortest exporter write spacing a replay uses:
// shorter, and seven to a hundred exporters would load the apiserver more
// than the jobs do.
const minWriteInterval = 20 * time.Millisecond

// never marks a moment that did not come.
const never = time.Duration(-1)

// record is what happened to one job, in workload time since the first
// submission.
type record struct {
	job
	Bound, Running, Ended time.Duration
	Node                  string
	Got                   []int // GPU positions on the node, from the kubelet
	// Worst is the worst level of the job's GPUs to the NICs it may use,
	// and Runtime what the time model makes of Duration on them; both set
	// when the job is Running. Runtime starts as Duration, so a job whose
	// assignment the kubelet no longer knows runs its aligned time, not 0.
	Worst    topology.Level
	Runtime  time.Duration
	Observed *annotations.Observed
	Refused  bool
	// Lag is how late the replay submitted the job against the written
	// arrival: the harness falling behind, not the scheduler.
	Lag time.Duration
}

// started fills a Running job's level and runtime from what the kubelet
// handed it.
func (r *record) started(m TimeModel, n nodeInfo, a kubeletsim.Assignment) {
	r.Got = a.GPUs
	r.Worst = n.worst(a)
	r.Runtime = m.Runtime(r.Duration, r.GPUs, r.RDMA, r.Worst)
}

// Run replays the plan's workload through a column's scheduler, with its
// kubelets, on a fresh cluster.
func Run(ctx context.Context, p *Plan, col Column, progress func(Progress)) (Result, error) {
	var res Result
	scheduler := col.Scheduler
	nodes := slices.Clone(p.nodes)
	for i := range nodes {
		nodes[i].Policy = col.Kubelet
	}
	env := runenv.New(strings.Split(scheduler, "-")[0])
	defer env.Close()
	err := env.Run(func() {
		cp := controlplane.Start(env)
		// The exporters' write spacing is compressed with the workload: at
		// 1 s of replay a freed GPU would stay unpublished for TimeScale
		// seconds of workload time, which no real cluster sees.
		opts := cluster.DefaultOptions()
		opts.MinWriteInterval = max(minWriteInterval, time.Duration(float64(opts.MinWriteInterval)/p.Workload.TimeScale))
		opts.StaticTopology = true
		cl := cluster.Start(env, cp, opts, nodes...)
		if _, err := cp.Kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "nicaffinity-system"}}, metav1.CreateOptions{}); err != nil {
			env.Fatalf("%v", err)
		}
		cfg, err := schedulerrun.ShippedConfig()
		if err != nil {
			env.Fatalf("%v", err)
		}
		schedulerrun.Start(env, cp, schedulerrun.WithDefaultProfile(cfg))
		if col.Kubelet == kubeletsim.DRA {
			draCtx, stop := context.WithCancel(ctx)
			env.Cleanup(stop)
			if err := startDRA(draCtx, cp, p, col); err != nil {
				env.Fatalf("%v", err)
			}
		}
		recs, end, err := replay(ctx, cp, cl, p, col, progress)
		if err != nil {
			env.Fatalf("%v", err)
		}
		res = summarize(col.Name, recs, p.info, end, p.Workload.TimeScale)
		res.Column = col
	})
	return res, err
}

// replay submits the jobs at their times, follows them through a pod
// informer, ends each after its duration, and gives up on those not Running
// within MaxWait.
func replay(ctx context.Context, cp *controlplane.ControlPlane, cl *cluster.Cluster, p *Plan, col Column, progress func(Progress)) ([]*record, time.Duration, error) {
	scheduler := col.Scheduler
	opts := cluster.DefaultOptions()
	w := p.Workload
	info := map[string]nodeInfo{}
	for _, n := range p.info {
		info[n.Name] = n
	}
	recs := make([]*record, len(p.jobs))
	byName := map[string]*record{}
	running := map[string]chan struct{}{}
	for i, j := range p.jobs {
		recs[i] = &record{job: j, Bound: never, Running: never, Ended: never, Runtime: j.Duration}
		byName[j.Name] = recs[i]
		running[j.Name] = make(chan struct{})
	}
	var mu sync.Mutex
	var start time.Time
	// since is workload time; the replay's clock runs TimeScale times faster.
	since := func() time.Duration { return time.Duration(float64(time.Since(start)) * w.TimeScale) }
	observe := func(obj any) {
		pod, ok := obj.(*corev1.Pod)
		if !ok {
			return
		}
		mu.Lock()
		defer mu.Unlock()
		r := byName[pod.Name]
		if r == nil || r.Ended != never {
			return
		}
		if pod.Spec.NodeName != "" && r.Bound == never {
			r.Bound, r.Node = since(), pod.Spec.NodeName
		}
		for _, c := range pod.Status.Conditions {
			if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse && c.Reason == corev1.PodReasonUnschedulable {
				r.Refused = true
			}
		}
		if pod.Status.Phase == corev1.PodRunning && r.Running == never {
			r.Running = since()
			if n := cl.Nodes[pod.Spec.NodeName]; n != nil {
				if a, ok := n.Kubelet.Assigned(pod.UID); ok {
					r.started(w.TimeModel, info[pod.Spec.NodeName], a)
				}
			}
			close(running[pod.Name])
		}
		if v, ok := pod.Annotations[annotations.ObservedKey]; ok && r.Observed == nil {
			if obs, err := annotations.ParseObserved(v); err == nil {
				r.Observed = &obs
			}
		}
	}
	factory := informers.NewSharedInformerFactoryWithOptions(cp.Kube, 0, informers.WithNamespace("default"))
	inf := factory.Core().V1().Pods().Informer()
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    observe,
		UpdateFunc: func(_, obj any) { observe(obj) },
	}); err != nil {
		return nil, 0, err
	}
	stop := make(chan struct{})
	defer close(stop)
	factory.Start(stop)
	if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		return nil, 0, fmt.Errorf("pod informer did not sync")
	}

	var wg sync.WaitGroup
	var submitted int
	var createErr error
	report := func() {
		if progress == nil {
			return
		}
		mu.Lock()
		s := Progress{Scheduler: col.Name, Elapsed: time.Since(start), Jobs: len(recs), Submitted: submitted}
		for _, r := range recs[:submitted] {
			switch {
			case r.Ended != never:
				s.Ended++
			case r.Running != never:
				s.Running++
			default:
				s.Waiting++
			}
		}
		mu.Unlock()
		progress(s)
	}
	ticker := time.NewTicker(500 * time.Millisecond)
	defer ticker.Stop()
	tickerDone := make(chan struct{})
	go func() {
		for {
			select {
			case <-ticker.C:
				report()
			case <-tickerDone:
				return
			}
		}
	}()

	pods := cp.Kube.CoreV1().Pods("default")
	mu.Lock()
	start = time.Now()
	mu.Unlock()
	for _, r := range recs {
		if d := w.replay(r.At - since()); d > 0 {
			select {
			case <-time.After(d):
			case <-ctx.Done():
				return nil, 0, ctx.Err()
			}
		}
		limits := corev1.ResourceList{"nvidia.com/gpu": *resource.NewQuantity(int64(r.GPUs), resource.DecimalSI)}
		switch {
		case r.VF:
			limits[corev1.ResourceName(opts.SRIOVResource)] = resource.MustParse("1")
		case r.RDMA:
			limits[corev1.ResourceName(opts.RDMAResource)] = resource.MustParse("1")
		}
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: r.Name, Namespace: "default"},
			Spec: corev1.PodSpec{SchedulerName: scheduler, Containers: []corev1.Container{{Name: "train", Image: "train",
				Resources: corev1.ResourceRequirements{Limits: limits, Requests: limits}}}}}
		if col.Kubelet == kubeletsim.DRA {
			pod = draPod(r, scheduler)
		}
		if col.Policy != "" {
			pod.Annotations = map[string]string{annotations.Policy: col.Policy}
		}
		mu.Lock()
		now := since()
		r.Lag = max(0, now-r.At)
		r.At = now // the real moment, for the report's time axis
		submitted++
		mu.Unlock()
		// Each job lives on a goroutine of its own from its submission: the
		// arrival clock never waits on the apiserver.
		wg.Add(1)
		go func(r *record) {
			defer wg.Done()
			if _, err := pods.Create(ctx, pod, metav1.CreateOptions{}); err != nil {
				mu.Lock()
				if createErr == nil {
					createErr = fmt.Errorf("create %s: %w", r.Name, err)
				}
				r.Ended = since()
				mu.Unlock()
				return
			}
			ran := false
			select {
			case <-running[r.Name]:
				ran = true
			case <-time.After(w.replay(w.MaxWait.Std())):
			case <-ctx.Done():
			}
			if ran {
				mu.Lock()
				d := r.Runtime
				mu.Unlock()
				select {
				case <-time.After(w.replay(d)):
				case <-ctx.Done():
				}
			}
			// The job ends now; the deletion's own latency is not its time.
			mu.Lock()
			r.Ended = since()
			mu.Unlock()
			_ = pods.Delete(context.Background(), r.Name, metav1.DeleteOptions{})
		}(r)
	}
	wg.Wait()
	close(tickerDone)
	report()
	mu.Lock()
	defer mu.Unlock()
	if createErr != nil {
		return nil, 0, createErr
	}
	return recs, since(), ctx.Err()
}
