package sim

import (
	"container/heap"
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	nrtv1alpha2 "github.com/k8stopologyawareschedwg/noderesourcetopology-api/pkg/apis/topology/v1alpha2"
	nrtinformers "github.com/k8stopologyawareschedwg/noderesourcetopology-api/pkg/generated/informers/externalversions"
	"github.com/k8stopologyawareschedwg/podfingerprint"
	corev1 "k8s.io/api/core/v1"
	schedulingv1beta1 "k8s.io/api/scheduling/v1beta1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/cache"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/nicaffinity/nicaffinity/internal/cluster"
	"github.com/nicaffinity/nicaffinity/internal/controlplane"
	"github.com/nicaffinity/nicaffinity/internal/kubeletsim"
	"github.com/nicaffinity/nicaffinity/internal/schedulerrun"
	"github.com/nicaffinity/nicaffinity/pkg/annotations"
	"github.com/nicaffinity/nicaffinity/pkg/devices"
	"github.com/nicaffinity/nicaffinity/pkg/nrt"
	"github.com/nicaffinity/nicaffinity/pkg/request"
)

// The replay runs on a virtual clock. Workload time moves only from one
// event (an arrival, a job's end, a job given up) to the next; at each, the
// replay applies the change (creates or deletes pods) and then waits until
// the cluster has settled before it moves on:
//
//   - the scheduler pops a pod only when the replay lets it, one at a time,
//     and only once everything below holds (schedulerrun's Step), until no
//     pod is left in its active or backoff queue and none is in flight.
//     Pods parked as unschedulable are settled: only an event moves them;
//   - every bound pod is admitted by its kubelet (Running, or Failed), and
//     every Running pod with GPUs carries its exporter's observation;
//   - every node's NodeResourceTopology counts the pods its kubelet holds
//     (the pod fingerprint), and the nicaffinity plugin's store holds it;
//   - every handler of the scheduler's pod and NodeResourceTopology
//     informers has processed what the apiserver holds, so the queue has
//     moved every pod an event would move;
//   - in the gang columns, the replay's PodGroups are those a live list
//     returns: a failed pod group's status, which the scheduler writes
//     itself and which requeues the group, has reached the handlers too.
//
// So a pod's placement follows from the cluster's state and the order of
// the queue, never from how fast the machine runs the components, and every
// figure of the report but the latencies is in workload time, which no
// scheduling delay stretches. The scheduler's latencies are measured on the
// wall clock and reported apart.

// settleTimeout bounds how long one event may go without progress (a pod
// popped) before the replay gives up and names what did not settle.
const settleTimeout = 60 * time.Second

// evKind orders events of one moment: jobs end (freeing GPUs) before jobs
// are given up, and both before jobs arrive.
type evKind int

const (
	evEnd evKind = iota
	evGiveUp
	evArrive
)

type event struct {
	at   time.Duration
	kind evKind
	job  int
}

type events []event

func (e events) Len() int { return len(e) }
func (e events) Less(i, j int) bool {
	if e[i].at != e[j].at {
		return e[i].at < e[j].at
	}
	if e[i].kind != e[j].kind {
		return e[i].kind < e[j].kind
	}
	return e[i].job < e[j].job
}
func (e events) Swap(i, j int) { e[i], e[j] = e[j], e[i] }
func (e *events) Push(x any)   { *e = append(*e, x.(event)) }
func (e *events) Pop() any {
	old := *e
	x := old[len(old)-1]
	*e = old[:len(old)-1]
	return x
}

// stepper is what the replay needs of the scheduler it steps: the
// settler of schedulerrun.Scheduler (a fake in tests).
type stepper interface {
	Idle() string
	Queued() int
	QueuedPods() []string
	Pending() map[types.UID]bool
	Assumed(pod *corev1.Pod) bool
	PodsBehind(want *schedulerrun.View, detail bool) string
	ObjectsBehind(gvr schema.GroupVersionResource, want *schedulerrun.View, detail bool) string
	PodGroupsBehind(want *schedulerrun.View, detail bool) string
	PluginObjects() map[string]string
	NextRelax() (time.Time, bool)
	Step(ctx context.Context) error
	Err() error
	Changed() <-chan struct{}
}

var _ stepper = (*schedulerrun.Scheduler)(nil)

// replayer is one column's replay.
type replayer struct {
	ctx   context.Context
	cp    *controlplane.ControlPlane
	cl    *cluster.Cluster
	sched stepper
	// clock is the plugin's: the virtual clock, at virtualEpoch + now.
	clock    *testingclock.FakeClock
	p        *Plan
	col      Column
	pods     typedcorev1.PodInterface
	info     map[string]nodeInfo
	recs     []*record
	byPod    map[string]*podRecord
	jobOf    map[string]*record
	queue    events
	now      time.Duration
	progress func(Progress)
	start    time.Time

	podStore, nrtStore, groupStore cache.Store
	// podView, nrtView and groupView are what the replay's own informers
	// have processed, as the scheduler's handlers must have too.
	podView, nrtView, groupView *schedulerrun.View
	changed                     chan struct{}
	// open are the jobs that arrived and have not started or ended, in
	// job order.
	open []int
	// alive are the pods the replay created and has not deleted.
	alive map[string]bool
	// created is when each pod was created on the wall clock, for the
	// latency rows.
	created map[string]time.Time

	// refused names the pods the scheduler has found unschedulable, as the
	// replay's pod handler saw their conditions. The scheduler writes that
	// condition after it has let go of the pod, so a moment can settle
	// before the write reaches the replay; read from the pods at a moment,
	// a refusal whose pod bound at the next one was missed or not by how
	// fast the write came. The handler sees every write, in order.
	refusedMu sync.Mutex
	refused   map[string]bool
}

func (r *replayer) notify() {
	select {
	case r.changed <- struct{}{}:
	default:
	}
}

// replay runs the plan's jobs through the column's scheduler on virtual time.
func replay(ctx context.Context, cp *controlplane.ControlPlane, cl *cluster.Cluster, sched *schedulerrun.Scheduler, clk *testingclock.FakeClock, p *Plan, col Column, progress func(Progress)) ([]*record, time.Duration, error) {
	r := &replayer{ctx: ctx, cp: cp, cl: cl, sched: sched, clock: clk, p: p, col: col, pods: cp.Kube.CoreV1().Pods("default"),
		info: map[string]nodeInfo{}, byPod: map[string]*podRecord{}, jobOf: map[string]*record{}, progress: progress,
		changed: make(chan struct{}, 1), alive: map[string]bool{}, created: map[string]time.Time{}, refused: map[string]bool{},
		podView: schedulerrun.NewView(func(obj any) bool {
			pod, ok := obj.(*corev1.Pod)
			return ok && pod.Status.Phase != corev1.PodSucceeded && pod.Status.Phase != corev1.PodFailed
		}), nrtView: schedulerrun.NewView(nil), groupView: schedulerrun.NewView(nil)}
	for _, n := range p.info {
		r.info[n.Name] = n
	}
	for i, j := range p.jobs {
		rec := &record{job: j, Bound: never, Running: never, Ended: never, Runtime: j.Duration}
		for k := 0; k < max(1, j.Pods); k++ {
			rec.Pods = append(rec.Pods, podRecord{Name: j.podName(k), Bound: never, Running: never})
		}
		r.recs = append(r.recs, rec)
		for k := range rec.Pods {
			r.byPod[rec.Pods[k].Name] = &rec.Pods[k]
			r.jobOf[rec.Pods[k].Name] = rec
		}
		heap.Push(&r.queue, event{at: j.At, kind: evArrive, job: i})
	}
	stop := make(chan struct{})
	defer close(stop)
	if err := r.watch(stop); err != nil {
		return nil, 0, err
	}
	r.start = time.Now()
	lastReport := time.Now()
	for r.queue.Len() > 0 {
		r.now = r.queue[0].at
		if at, ok := r.relaxAt(); ok && at < r.now {
			r.now = at // a bounded wait ends before the next event
		}
		// The plugin's clock moves to the moment; the waits that end now
		// requeue their pods (Handle.Activate) before the settle.
		r.clock.SetTime(virtualEpoch.Add(r.now))
		for r.queue.Len() > 0 && r.queue[0].at == r.now {
			if err := r.apply(heap.Pop(&r.queue).(event)); err != nil {
				return nil, 0, err
			}
		}
		if err := r.settle(); err != nil {
			return nil, 0, err
		}
		r.observe()
		if time.Since(lastReport) > 500*time.Millisecond {
			r.report()
			lastReport = time.Now()
		}
	}
	r.report()
	// Every refusal has reached the handler by now: a refused pod's
	// condition comes before its binding, and a job never bound is given
	// up on moments later.
	r.refusedMu.Lock()
	for name := range r.refused {
		if rec := r.jobOf[name]; rec != nil {
			rec.Refused = true
		}
	}
	r.refusedMu.Unlock()
	return r.recs, r.now, ctx.Err()
}

// virtualEpoch is the plugin's clock at workload time 0.
var virtualEpoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// relaxAt is when, in workload time, the plugin's next bounded wait ends.
func (r *replayer) relaxAt() (time.Duration, bool) {
	at, ok := r.sched.NextRelax()
	if !ok {
		return 0, false
	}
	return at.Sub(virtualEpoch), true
}

// watch starts the replay's own pod and NodeResourceTopology informers.
func (r *replayer) watch(stop chan struct{}) error {
	track := func(v *schedulerrun.View, seen func(obj any)) cache.ResourceEventHandler {
		return cache.ResourceEventHandlerFuncs{
			AddFunc:    func(obj any) { seen(obj); v.Set(obj); r.notify() },
			UpdateFunc: func(_, obj any) { seen(obj); v.Set(obj); r.notify() },
			DeleteFunc: func(obj any) { v.Delete(obj); r.notify() },
		}
	}
	nothing := func(any) {}
	pf := informers.NewSharedInformerFactoryWithOptions(r.cp.Kube, 0, informers.WithNamespace("default"))
	podInf := pf.Core().V1().Pods().Informer()
	if _, err := podInf.AddEventHandler(track(r.podView, r.noteRefusal)); err != nil {
		return err
	}
	nf := nrtinformers.NewSharedInformerFactory(r.cp.NRT, 0)
	nrtInf := nf.Topology().V1alpha2().NodeResourceTopologies().Informer()
	if _, err := nrtInf.AddEventHandler(track(r.nrtView, nothing)); err != nil {
		return err
	}
	groupInf := pf.Scheduling().V1beta1().PodGroups().Informer()
	if _, err := groupInf.AddEventHandler(track(r.groupView, nothing)); err != nil {
		return err
	}
	r.podStore, r.nrtStore, r.groupStore = podInf.GetStore(), nrtInf.GetStore(), groupInf.GetStore()
	pf.Start(stop)
	nf.Start(stop)
	if !cache.WaitForCacheSync(r.ctx.Done(), podInf.HasSynced, nrtInf.HasSynced, groupInf.HasSynced) {
		return fmt.Errorf("the replay's informers did not sync")
	}
	return nil
}

// apply makes one event's change.
func (r *replayer) apply(e event) error {
	rec := r.recs[e.job]
	switch e.kind {
	case evArrive:
		if r.gang(rec) {
			pg := &schedulingv1beta1.PodGroup{ObjectMeta: metav1.ObjectMeta{Name: rec.Name, Namespace: "default"},
				Spec: schedulingv1beta1.PodGroupSpec{SchedulingPolicy: schedulingv1beta1.PodGroupSchedulingPolicy{
					Gang: &schedulingv1beta1.GangSchedulingPolicy{MinCount: int32(len(rec.Pods))}}}}
			if _, err := r.cp.Kube.SchedulingV1beta1().PodGroups("default").Create(r.ctx, pg, metav1.CreateOptions{}); err != nil {
				return fmt.Errorf("create PodGroup %s: %w", rec.Name, err)
			}
		}
		for k := range rec.Pods {
			pod := r.podFor(rec, rec.Pods[k].Name)
			r.created[pod.Name] = time.Now()
			if _, err := r.pods.Create(r.ctx, pod, metav1.CreateOptions{}); err != nil {
				return fmt.Errorf("create %s: %w", pod.Name, err)
			}
			r.alive[pod.Name] = true
		}
		heap.Push(&r.queue, event{at: r.now + r.p.Workload.MaxWait.Std(), kind: evGiveUp, job: e.job})
		at, _ := slices.BinarySearch(r.open, e.job)
		r.open = slices.Insert(r.open, at, e.job)
	case evGiveUp:
		if rec.Running != never || rec.Ended != never {
			return nil
		}
		return r.end(rec)
	case evEnd:
		return r.end(rec)
	}
	return nil
}

// end deletes a job's pods; the deletion's own latency is not its time.
func (r *replayer) end(rec *record) error {
	if rec.Ended != never {
		return nil
	}
	rec.Ended = r.now
	for _, pr := range rec.Pods {
		if err := r.pods.Delete(r.ctx, pr.Name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("delete %s: %w", pr.Name, err)
		}
		delete(r.alive, pr.Name)
	}
	if r.gang(rec) {
		if err := r.cp.Kube.SchedulingV1beta1().PodGroups("default").Delete(r.ctx, rec.Name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("delete PodGroup %s: %w", rec.Name, err)
		}
	}
	return nil
}

// gang reports whether the column places rec as a PodGroup.
func (r *replayer) gang(rec *record) bool { return r.col.Gang && len(rec.Pods) > 1 }

// podFor is the pod of one of a job's pods, for the column.
func (r *replayer) podFor(rec *record, name string) *corev1.Pod {
	opts := cluster.DefaultOptions()
	limits := corev1.ResourceList{"nvidia.com/gpu": *resource.NewQuantity(int64(rec.GPUs), resource.DecimalSI)}
	switch {
	case rec.VF:
		limits[corev1.ResourceName(opts.SRIOVResource)] = resource.MustParse("1")
	case rec.RDMA:
		limits[corev1.ResourceName(opts.RDMAResource)] = resource.MustParse("1")
	}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", Labels: map[string]string{jobLabel: rec.Name}},
		Spec: corev1.PodSpec{SchedulerName: r.col.Scheduler, Containers: []corev1.Container{{Name: "train", Image: "train",
			Resources: corev1.ResourceRequirements{Limits: limits, Requests: limits}}}}}
	if r.col.Kubelet == kubeletsim.DRA {
		pod = draPod(rec, name, r.col.Scheduler)
		pod.Labels = map[string]string{jobLabel: rec.Name}
	}
	if r.col.Policy != "" {
		pod.Annotations = map[string]string{annotations.Policy: r.col.Policy}
	}
	if r.col.AlignmentWait != "" {
		if pod.Annotations == nil {
			pod.Annotations = map[string]string{}
		}
		pod.Annotations[annotations.AlignmentWait] = r.col.AlignmentWait
	}
	if r.gang(rec) {
		// The PodGroup makes it a gang; the job label is how the plugin
		// knows its job (a PodGroup names it too), so it follows its rails,
		// required: a gang either binds on one rail set or waits. Under
		// preferred, a job's first pod can take rails its others then find
		// no room on (docs/simulate.md, Jobs).
		pod.Labels[request.IndexedJobLabel] = rec.Name
		if pod.Annotations == nil {
			pod.Annotations = map[string]string{}
		}
		pod.Annotations[annotations.Rails] = annotations.PolicyRequired
		pod.Spec.SchedulingGroup = &corev1.PodSchedulingGroup{PodGroupName: &rec.Name}
	}
	return pod
}

// jobLabel names a pod's job.
const jobLabel = "sim.nicaffinity.io/job"

// settle lets the scheduler work until the cluster has settled.
//
// A pod group whose attempt fails can requeue itself straight into the
// active queue: the scheduler writes the group's status, and that update
// is an event for the group. With the backoff off (replaySchedulerOptions)
// that would retry it without end. So when a step leaves the cluster as
// it found it (the same pods bound, the same pods queued) and a pod
// group's member is queued, the moment is settled and what is queued is
// tried again at the next moment of the virtual clock, as a real
// scheduler retries it after its backoff.
func (r *replayer) settle() error {
	last := time.Now()
	before := ""
	for {
		why := r.unsettled(false)
		if why == "" && r.sched.Queued() > 0 {
			// Step, unless the last step changed nothing (see above).
			if state, groups := r.stepState(); state != before || !groups {
				before = state
				if err := r.sched.Step(r.ctx); err != nil {
					return err
				}
				last = time.Now()
				continue
			}
		}
		if why == "" {
			var err error
			if why, err = r.groupsBehindServer(); err != nil {
				return err
			}
			if why == "" {
				return nil
			}
		}
		if time.Since(last) > settleTimeout {
			detail := r.unsettled(true)
			if detail == "" {
				detail = why
			}
			return fmt.Errorf("%s, at %s of workload time: the cluster did not settle within %s: %s", r.col.Name, r.now.Round(time.Second), settleTimeout, detail)
		}
		if err := r.sched.Err(); err != nil {
			return fmt.Errorf("%s: the scheduler stopped: %w", r.col.Name, err)
		}
		select {
		case <-r.changed:
		case <-r.sched.Changed():
		case <-time.After(2 * time.Millisecond):
		case <-r.ctx.Done():
			return r.ctx.Err()
		}
	}
}

// groupsBehindServer says whether the apiserver holds a PodGroup the
// replay's view has not processed at that version ("" when it holds none;
// only the gang columns make PodGroups). The scheduler writes a pod
// group's status inside the attempt that failed, so once it is idle the
// apiserver has the write, but its event can still be on the way to the
// informers, where no other check looks for it: it requeues the group, and
// arriving only after a later moment had settled, it would have the group
// tried a moment late. A live list closes that window; the next round of
// unsettled then holds the scheduler's PodGroup handlers to the view.
func (r *replayer) groupsBehindServer() (string, error) {
	if !r.col.Gang {
		return "", nil
	}
	list, err := r.cp.Kube.SchedulingV1beta1().PodGroups("default").List(r.ctx, metav1.ListOptions{})
	if err != nil {
		return "", fmt.Errorf("%s: listing PodGroups: %w", r.col.Name, err)
	}
	objs := make([]any, len(list.Items))
	for i := range list.Items {
		objs[i] = &list.Items[i]
	}
	if !r.groupView.Holds(objs) {
		return "the replay's PodGroup informer has not yet seen every PodGroup write the apiserver holds", nil
	}
	return "", nil
}

// stepState is what a step can change: which pods are bound, and which
// wait in the scheduler's active and backoff queues; groups is whether
// one of those is a pod group's member. Only pod groups requeue
// themselves: a plain pod that fails is parked until an event, so the rule
// applies to pod groups alone, and a queue of plain pods is stepped until
// it is empty, as it always was.
func (r *replayer) stepState() (state string, groups bool) {
	queued := r.sched.QueuedPods()
	for _, key := range queued {
		if obj, ok, _ := r.podStore.GetByKey(key); ok && obj.(*corev1.Pod).Spec.SchedulingGroup != nil {
			groups = true
			break
		}
	}
	if !groups {
		return "", false // the rule does not apply: no scan of the pods
	}
	var bound []string
	for _, obj := range r.podStore.List() {
		if pod := obj.(*corev1.Pod); pod.Spec.NodeName != "" {
			bound = append(bound, pod.Name+"@"+pod.Spec.NodeName)
		}
	}
	// Both lists come in map order: sorted, equal states compare equal.
	slices.Sort(bound)
	slices.Sort(queued)
	return strings.Join(bound, " ") + " | " + strings.Join(queued, " "), true
}

// unsettled says what has not settled yet ("" when everything has); with
// detail, down to the object where that costs a scan.
//
// Every check reads one snapshot of the replay's stores, taken before the
// scheduler's handlers are compared with the replay's views. An informer
// can deliver an event at any point of the checks: read again after the
// comparison, a store could already show what a scheduler handler is still
// processing (a deleted pod gone, a node's new object), and the moment
// would pass as settled while the handler was still requeueing pods.
// Checked against the snapshot, the replay's views hold at least that
// snapshot when they are compared, so the scheduler's handlers have
// processed everything the checks below look at.
func (r *replayer) unsettled(detail bool) string {
	// Cheap checks first: most calls come while something is in flight.
	if why := r.sched.Idle(); why != "" {
		return "the scheduler: " + why
	}
	pods, nrts, groups := r.podStore.List(), r.nrtStore.List(), r.groupStore.List()
	if why := r.viewsBehind(pods, nrts, groups, detail); why != "" {
		return why
	}
	why, onNode := r.podsUnsettled(pods)
	if why != "" {
		return why
	}
	return r.objectsUnsettled(nrts, onNode)
}

// viewsBehind: the replay's own views first, since the scheduler's
// handlers are compared with them, so they must have caught up with the
// replay's informers; then the scheduler's handlers and the plugin's
// objects against those views.
func (r *replayer) viewsBehind(pods, nrts, groups []any, detail bool) string {
	if !r.podView.Holds(pods) {
		return "the replay's pod informer has not handed every pod event to its handler yet"
	}
	if !r.nrtView.Holds(nrts) {
		return "the replay's NodeResourceTopology informer has not handed every event to its handler yet"
	}
	if !r.groupView.Holds(groups) {
		return "the replay's PodGroup informer has not handed every event to its handler yet"
	}
	if why := r.sched.PodsBehind(r.podView, detail); why != "" {
		return "the scheduler's " + why
	}
	if why := r.sched.ObjectsBehind(nrtGVR, r.nrtView, detail); why != "" {
		return "the scheduler's " + why
	}
	if why := r.sched.PodGroupsBehind(r.groupView, detail); why != "" {
		return "the scheduler's " + why
	}
	if held := r.sched.PluginObjects(); held != nil {
		if name, rv := r.nrtView.Differs(held); name != "" {
			return fmt.Sprintf("the nicaffinity plugin holds %s's object at resourceVersion %q, the apiserver %q", name, held[name], rv)
		}
	}
	return ""
}

// podsUnsettled checks every pod of the snapshot against the replay and
// the scheduler: created and deleted as the replay did, each pending one
// in the queue with no binding in flight, each bound one admitted and
// observed. onNode are the running pods by node.
func (r *replayer) podsUnsettled(pods []any) (string, map[string][]*corev1.Pod) {
	listed := make(map[string]bool, len(pods))
	for _, obj := range pods {
		listed[obj.(*corev1.Pod).Name] = true
	}
	for name := range r.alive {
		if !listed[name] {
			return fmt.Sprintf("pod %s, created, is not yet in the replay's informer", name), nil
		}
	}
	var pending map[string]bool
	onNode := map[string][]*corev1.Pod{}
	for _, obj := range pods {
		pod := obj.(*corev1.Pod)
		if !r.alive[pod.Name] {
			return fmt.Sprintf("pod %s, deleted, is still there", pod.Name), nil
		}
		if pod.Spec.NodeName == "" {
			if pending == nil {
				pending = map[string]bool{}
				for uid := range r.sched.Pending() {
					pending[string(uid)] = true
				}
			}
			if why := r.pendingUnsettled(pod, pending); why != "" {
				return why, nil
			}
			continue
		}
		switch pod.Status.Phase {
		case corev1.PodRunning:
			onNode[pod.Spec.NodeName] = append(onNode[pod.Spec.NodeName], pod)
			if _, ok := pod.Annotations[annotations.ObservedKey]; !ok && r.col.Kubelet != kubeletsim.DRA {
				return fmt.Sprintf("pod %s: the exporter of %s has not observed it", pod.Name, pod.Spec.NodeName), nil
			}
		case corev1.PodFailed, corev1.PodSucceeded:
		default:
			return fmt.Sprintf("pod %s: the kubelet of %s has not admitted it", pod.Name, pod.Spec.NodeName), nil
		}
	}
	return "", onNode
}

// pendingUnsettled: a pod not bound is in the scheduler's queue, with no
// binding in flight and, on a DRA cluster, its claim made.
func (r *replayer) pendingUnsettled(pod *corev1.Pod, pending map[string]bool) string {
	if !pending[string(pod.UID)] {
		return fmt.Sprintf("pod %s is not in the scheduler's queue", pod.Name)
	}
	if r.sched.Assumed(pod) {
		return fmt.Sprintf("pod %s: its binding is in flight", pod.Name)
	}
	if r.col.Kubelet == kubeletsim.DRA && len(pod.Status.ResourceClaimStatuses) == 0 {
		return fmt.Sprintf("pod %s: the resource claim controller has not made its claim", pod.Name)
	}
	return ""
}

// objectsUnsettled: every node has its object, counting the pods running
// there.
func (r *replayer) objectsUnsettled(nrts []any, onNode map[string][]*corev1.Pod) string {
	objects := make(map[string]*nrtv1alpha2.NodeResourceTopology, len(nrts))
	for _, obj := range nrts {
		if o, ok := obj.(*nrtv1alpha2.NodeResourceTopology); ok {
			objects[o.Name] = o
		}
	}
	for _, n := range r.p.info {
		obj, ok := objects[n.Name]
		if !ok {
			return fmt.Sprintf("node %s has no NodeResourceTopology", n.Name)
		}
		if got, want := fingerprintAttr(obj), podSetFingerprint(onNode[n.Name]); got != want {
			return fmt.Sprintf("node %s: its NodeResourceTopology counts another pod set (fingerprint %s, its pods %s)", n.Name, got, want)
		}
	}
	return ""
}

var nrtGVR = nrtv1alpha2.SchemeGroupVersion.WithResource("noderesourcetopologies")

func fingerprintAttr(o *nrtv1alpha2.NodeResourceTopology) string {
	for _, a := range o.Attributes {
		if a.Name == podfingerprint.Attribute {
			return a.Value
		}
	}
	return ""
}

func podSetFingerprint(pods []*corev1.Pod) string {
	set := make([]devices.Pod, len(pods))
	for i, p := range pods {
		set[i] = devices.Pod{Namespace: p.Namespace, Name: p.Name}
	}
	return nrt.Fingerprint(set)
}

// observe records, after a settle, what changed at this moment: pods
// bound, admitted and observed, jobs that now run (whose end becomes an
// event), and pods found unschedulable.
func (r *replayer) observe() {
	for _, obj := range r.podStore.List() {
		pod := obj.(*corev1.Pod)
		pr, rec := r.byPod[pod.Name], r.jobOf[pod.Name]
		if pr == nil || rec.Ended != never {
			continue
		}
		if pod.Spec.NodeName != "" && pr.Bound == never {
			pr.Bound, pr.Node = r.now, pod.Spec.NodeName
			pr.BindLatency = time.Since(r.created[pod.Name])
		}
		if pod.Status.Phase == corev1.PodRunning && pr.Running == never {
			pr.Running = r.now
			pr.RunLatency = time.Since(r.created[pod.Name])
			if n := r.cl.Nodes[pod.Spec.NodeName]; n != nil {
				if a, ok := n.Kubelet.Assigned(pod.UID); ok {
					pr.Got, pr.assignment = a.GPUs, a
				}
			}
		}
		// Parsed once per value: the annotation changes rarely, the
		// moments are many.
		if v, ok := pod.Annotations[annotations.ObservedKey]; ok && v != pr.observedRaw {
			if obs, err := annotations.ParseObserved(v); err == nil {
				pr.Observed, pr.observedRaw = &obs, v
			}
		}
	}
	// Jobs in job order, so that ends at one moment are queued alike;
	// only those that arrived and have not started can start.
	open := r.open[:0]
	defer func() { r.open = open }()
	for _, i := range r.open {
		rec := r.recs[i]
		if rec.Ended != never || rec.Running != never {
			continue
		}
		open = append(open, i)
		bound, running := true, true
		for _, pr := range rec.Pods {
			bound = bound && pr.Bound != never
			running = running && pr.Running != never
		}
		if bound && rec.Bound == never {
			rec.Bound = r.now
		}
		if running {
			open = open[:len(open)-1]
			rec.Running = r.now
			rec.started(r.p.Workload.TimeModel, r.info)
			if rec.SplitRails {
				rec.SplitAvoidable = splitAvoidable(rec, r.recs, r.info)
			}
			heap.Push(&r.queue, event{at: r.now + rec.Runtime, kind: evEnd, job: i})
		}
	}
}

// noteRefusal remembers a pod the scheduler found unschedulable (refused).
func (r *replayer) noteRefusal(obj any) {
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return
	}
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse && c.Reason == corev1.PodReasonUnschedulable {
			r.refusedMu.Lock()
			r.refused[pod.Name] = true
			r.refusedMu.Unlock()
			return
		}
	}
}

func (r *replayer) report() {
	if r.progress == nil {
		return
	}
	s := Progress{Scheduler: r.col.Name, Elapsed: time.Since(r.start), Workload: r.now, Jobs: len(r.recs)}
	for _, rec := range r.recs {
		switch {
		case rec.At > r.now:
			continue
		case rec.Ended != never:
			s.Ended++
		case rec.Running != never:
			s.Running++
		default:
			s.Waiting++
		}
		s.Submitted++
	}
	r.progress(s)
}
