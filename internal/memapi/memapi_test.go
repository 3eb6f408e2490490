package memapi_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	nrtv1alpha2 "github.com/k8stopologyawareschedwg/noderesourcetopology-api/pkg/apis/topology/v1alpha2"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"

	"github.com/nicaffinity/nicaffinity/internal/controlplane"
	"github.com/nicaffinity/nicaffinity/internal/memapi"
)

// seen is what a watcher saw of one event, in the words the replay's
// components act on.
type seen struct {
	Type     watch.EventType
	Node     string
	Phase    corev1.PodPhase
	Deleting bool
	Grace    string
	Plan     string
}

func seenOf(e watch.Event) seen {
	pod, ok := e.Object.(*corev1.Pod)
	if !ok {
		return seen{Type: e.Type}
	}
	s := seen{Type: e.Type, Node: pod.Spec.NodeName, Phase: pod.Status.Phase, Deleting: pod.DeletionTimestamp != nil, Plan: pod.Annotations["plan"]}
	if g := pod.DeletionGracePeriodSeconds; g != nil {
		s.Grace = fmt.Sprint(*g)
	}
	return s
}

// script is what a replay does to a pod in its life, through client-go:
// create, bind with an annotation, a status write that changes nothing,
// the kubelet's Running, an annotation patch, a graceful delete and the
// kubelet's final one; and a second pod deleted before it binds.
func script(ctx context.Context, kube kubernetes.Interface) error {
	pods := kube.CoreV1().Pods("default")
	gpu := corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("1")}
	for _, name := range []string{"a", "b"} {
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "i",
			Resources: corev1.ResourceRequirements{Limits: gpu, Requests: gpu}}}}}
		if _, err := pods.Create(ctx, pod, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("creating %s: %w", name, err)
		}
	}
	if err := pods.Bind(ctx, &corev1.Binding{ObjectMeta: metav1.ObjectMeta{Name: "a", Namespace: "default", Annotations: map[string]string{"plan": "gpu0"}},
		Target: corev1.ObjectReference{Kind: "Node", Name: "n1"}}, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("binding a: %w", err)
	}
	err := pods.Bind(ctx, &corev1.Binding{ObjectMeta: metav1.ObjectMeta{Name: "a", Namespace: "default"}, Target: corev1.ObjectReference{Kind: "Node", Name: "n2"}}, metav1.CreateOptions{})
	if !apierrors.IsConflict(err) {
		return fmt.Errorf("second binding: %v, want a conflict", err)
	}
	a, err := pods.Get(ctx, "a", metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("reading a: %w", err)
	}
	if _, err := pods.UpdateStatus(ctx, a, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("a's status unchanged: %w", err)
	}
	running := a.DeepCopy()
	running.Status.Phase = corev1.PodRunning
	running.Spec.NodeName = "elsewhere" // a status write cannot move a pod
	if _, err := pods.UpdateStatus(ctx, running, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("a running: %w", err)
	}
	if _, err := pods.UpdateStatus(ctx, a, metav1.UpdateOptions{}); !apierrors.IsConflict(err) {
		return fmt.Errorf("a stale status write: %v, want a conflict", err)
	}
	if _, err := pods.Patch(ctx, "a", types.MergePatchType, []byte(`{"metadata":{"annotations":{"plan":"gpu1"}}}`), metav1.PatchOptions{}); err != nil {
		return fmt.Errorf("patching a: %w", err)
	}
	if err := pods.Delete(ctx, "a", metav1.DeleteOptions{}); err != nil {
		return fmt.Errorf("deleting a: %w", err)
	}
	zero := int64(0)
	if err := pods.Delete(ctx, "a", metav1.DeleteOptions{GracePeriodSeconds: &zero}); err != nil {
		return fmt.Errorf("deleting a at once: %w", err)
	}
	if err := pods.Delete(ctx, "b", metav1.DeleteOptions{}); err != nil {
		return fmt.Errorf("deleting b: %w", err)
	}
	if _, err := pods.Get(ctx, "a", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		return fmt.Errorf("a after its deletion: %v, want not found", err)
	}
	return nil
}

// record runs the script while two watchers look on: every pod, and the
// pods of node n1 (as a kubelet watches).
func record(t *testing.T, kube kubernetes.Interface) map[string][]seen {
	t.Helper()
	ctx := context.Background()
	if _, err := kube.CoreV1().Namespaces().Get(ctx, "default", metav1.GetOptions{}); apierrors.IsNotFound(err) {
		if _, err := kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	list, err := kube.CoreV1().Pods("default").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	watchers := map[string]watch.Interface{}
	for name, sel := range map[string]string{"all": "", "n1": fields.OneTermEqualSelector("spec.nodeName", "n1").String()} {
		w, err := kube.CoreV1().Pods("default").Watch(ctx, metav1.ListOptions{ResourceVersion: list.ResourceVersion, FieldSelector: sel})
		if err != nil {
			t.Fatal(err)
		}
		defer w.Stop()
		watchers[name] = w
	}
	if err := script(ctx, kube); err != nil {
		t.Fatal(err)
	}
	want := map[string]int{"all": 10, "n1": 6}
	got := map[string][]seen{}
	for name, w := range watchers {
		timeout := time.After(10 * time.Second)
		for len(got[name]) < want[name] {
			select {
			case e := <-w.ResultChan():
				got[name] = append(got[name], seenOf(e))
			case <-timeout:
				t.Fatalf("%s: %d events, want %d: %+v", name, len(got[name]), want[name], got[name])
			}
		}
	}
	return got
}

// TestSameEventsAsAPIServer runs one script against kube-apiserver and
// against the in-memory API and wants the same events, in order, for a
// watcher of every pod and a watcher of one node's pods.
func TestSameEventsAsAPIServer(t *testing.T) {
	cp := controlplane.Start(t)
	ref := record(t, cp.Kube)
	api, err := memapi.New()
	if err != nil {
		t.Fatal(err)
	}
	defer api.Close()
	mem := record(t, api.Kube())
	if diff := cmp.Diff(ref, mem); diff != "" {
		t.Errorf("events from kube-apiserver (-) and in memory (+):\n%s", diff)
	}
	// The script's shape, so that the comparison compares something.
	if n := len(ref["n1"]); n != 6 || ref["n1"][0].Type != watch.Added || ref["n1"][5].Type != watch.Deleted {
		t.Errorf("node n1's watcher saw %+v", ref["n1"])
	}
}

func newAPI(t *testing.T, opts ...memapi.Option) *memapi.API {
	t.Helper()
	api, err := memapi.New(opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(api.Close)
	return api
}

// TestWrites: what each write does to the stored object and its version.
func TestWrites(t *testing.T) {
	ctx := context.Background()
	api := newAPI(t)
	kube := api.Kube()
	pods := kube.CoreV1().Pods("default")
	pod, err := pods.Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p"}, Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c"}}}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if pod.Status.Phase != corev1.PodPending || pod.Spec.SchedulerName != corev1.DefaultSchedulerName || pod.Spec.Priority == nil || pod.UID == "" || pod.ResourceVersion == "" {
		t.Errorf("a new pod lacks the apiserver's defaults: %+v", pod)
	}
	if _, err := pods.Create(ctx, pod, metav1.CreateOptions{}); !apierrors.IsAlreadyExists(err) && !apierrors.IsBadRequest(err) {
		t.Errorf("creating it again: %v", err)
	}
	same, err := pods.Update(ctx, pod, metav1.UpdateOptions{})
	if err != nil || same.ResourceVersion != pod.ResourceVersion {
		t.Errorf("an update that changes nothing: %v, version %s -> %s (want no write)", err, pod.ResourceVersion, same.ResourceVersion)
	}
	changed := pod.DeepCopy()
	changed.Labels = map[string]string{"a": "b"}
	changed.Status.Phase = corev1.PodRunning
	got, err := pods.Update(ctx, changed, metav1.UpdateOptions{})
	if err != nil || got.ResourceVersion == pod.ResourceVersion || got.Status.Phase != corev1.PodPending || got.Labels["a"] != "b" {
		t.Errorf("an update: %v, %+v (want the labels, not the status)", err, got)
	}
	if _, err := pods.Update(ctx, changed, metav1.UpdateOptions{}); !apierrors.IsConflict(err) {
		t.Errorf("an update at a stale version: %v, want a conflict", err)
	}
	if _, err := pods.List(ctx, metav1.ListOptions{FieldSelector: "spec.hostname=x"}); !apierrors.IsBadRequest(err) || !strings.Contains(err.Error(), "spec.hostname") {
		t.Errorf("an unsupported field selector: %v, want a bad request naming it", err)
	}
	if _, err := kube.CoreV1().Pods("other").Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "q", Namespace: "default"}}, metav1.CreateOptions{}); !apierrors.IsBadRequest(err) {
		t.Errorf("a pod of namespace default created in other: %v, want a bad request", err)
	}
}

// TestWatchResumes: a watch from a list's version sees every later
// write once; one from a version the history has dropped gets 410 Gone.
func TestWatchResumes(t *testing.T) {
	ctx := context.Background()
	api := newAPI(t)
	kube := api.Kube()
	list, err := kube.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		if _, err := kube.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprint("n", i)}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	w, err := kube.CoreV1().Nodes().Watch(ctx, metav1.ListOptions{ResourceVersion: list.ResourceVersion})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	var names []string
	for range 3 {
		e := <-w.ResultChan()
		names = append(names, string(e.Type)+" "+e.Object.(*corev1.Node).Name)
	}
	if diff := cmp.Diff([]string{"ADDED n0", "ADDED n1", "ADDED n2"}, names); diff != "" {
		t.Errorf("events (-want,+got):\n%s", diff)
	}
	if _, err := kube.CoreV1().Nodes().Watch(ctx, metav1.ListOptions{ResourceVersion: "999999"}); err == nil {
		t.Errorf("a watch from a future version started")
	}
}

// TestObjectsForThePlugin: the dynamic client (the plugin's) reads what
// the exporter applied, unstructured with its kind; an apply that
// changes nothing is no write.
func TestObjectsForThePlugin(t *testing.T) {
	ctx := context.Background()
	api := newAPI(t)
	exp := api.Exporter()
	body := []byte(`{"apiVersion":"topology.node.k8s.io/v1alpha2","kind":"NodeResourceTopology","metadata":{"name":"n1"},"attributes":[{"name":"a","value":"1"}]}`)
	if err := exp.ApplyNRT(ctx, "n1", body); err != nil {
		t.Fatal(err)
	}
	first, err := exp.GetNRT(ctx, "n1")
	if err != nil {
		t.Fatal(err)
	}
	if err := exp.ApplyNRT(ctx, "n1", body); err != nil {
		t.Fatal(err)
	}
	again, err := exp.GetNRT(ctx, "n1")
	if err != nil || again.ResourceVersion != first.ResourceVersion {
		t.Errorf("the same apply again: %v, version %s -> %s (want no write)", err, first.ResourceVersion, again.ResourceVersion)
	}
	if err := exp.ApplyNRT(ctx, "n1", []byte(`{"kind":`)); !apierrors.IsBadRequest(err) {
		t.Errorf("a garbled apply: %v, want a bad request", err)
	}
	gvr := nrtv1alpha2.SchemeGroupVersion.WithResource("noderesourcetopologies")
	l, err := api.Dynamic().Resource(gvr).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(l.Items) != 1 || l.Items[0].GetKind() != "NodeResourceTopology" || l.Items[0].GetName() != "n1" {
		t.Errorf("dynamic list: %+v", l.Items)
	}
}
