package sim

import (
	"context"
	"strings"
	"testing"
	"time"

	nrtv1alpha2 "github.com/k8stopologyawareschedwg/noderesourcetopology-api/pkg/apis/topology/v1alpha2"
	"github.com/k8stopologyawareschedwg/podfingerprint"
	corev1 "k8s.io/api/core/v1"
	schedulingv1beta1 "k8s.io/api/scheduling/v1beta1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/cache"

	"github.com/nicaffinity/nicaffinity/internal/controlplane"
	"github.com/nicaffinity/nicaffinity/internal/schedulerrun"
	"github.com/nicaffinity/nicaffinity/pkg/annotations"
)

// fakeStepper is a scheduler whose handlers always hold what the replay's
// views hold when compared; deliver, if set, runs right after the
// comparison of one kind of view: an informer handing the replay (and the
// scheduler, whose handler is then still at work) an event mid-check.
type fakeStepper struct {
	pending map[types.UID]bool
	// deliverAfter names the comparison ("pods" or "objects") after which
	// deliver runs, once.
	deliverAfter string
	deliver      func()
}

func (f *fakeStepper) after(what string) {
	if f.deliverAfter == what && f.deliver != nil {
		f.deliver()
		f.deliver = nil
	}
}

func (f *fakeStepper) Idle() string                                    { return "" }
func (f *fakeStepper) Queued() int                                     { return 0 }
func (f *fakeStepper) QueuedPods() []string                            { return nil }
func (f *fakeStepper) Pending() map[types.UID]bool                     { return f.pending }
func (f *fakeStepper) Assumed(*corev1.Pod) bool                        { return false }
func (f *fakeStepper) PluginObjects() map[string]string                { return nil }
func (f *fakeStepper) NextRelax() (time.Time, bool)                    { return time.Time{}, false }
func (f *fakeStepper) Step(context.Context) error                      { return nil }
func (f *fakeStepper) Err() error                                      { return nil }
func (f *fakeStepper) Changed() <-chan struct{}                        { return nil }
func (f *fakeStepper) PodGroupsBehind(*schedulerrun.View, bool) string { return "" }
func (f *fakeStepper) PodsBehind(*schedulerrun.View, bool) string {
	f.after("pods")
	return ""
}
func (f *fakeStepper) ObjectsBehind(schema.GroupVersionResource, *schedulerrun.View, bool) string {
	f.after("objects")
	return ""
}

func runningPod(name, node string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", UID: types.UID(name), ResourceVersion: "1",
			Annotations: map[string]string{annotations.ObservedKey: "{}"}},
		Spec:   corev1.PodSpec{NodeName: node},
		Status: corev1.PodStatus{Phase: corev1.PodRunning},
	}
}

func nodeObject(name, rv string, pods ...*corev1.Pod) *nrtv1alpha2.NodeResourceTopology {
	return &nrtv1alpha2.NodeResourceTopology{
		ObjectMeta: metav1.ObjectMeta{Name: name, ResourceVersion: rv},
		Attributes: nrtv1alpha2.AttributeList{{Name: podfingerprint.Attribute, Value: podSetFingerprint(pods)}},
	}
}

// TestUnsettledReadsOneSnapshot: a moment is settled only if what the
// replay compared with the scheduler's handlers is also what it checked.
// An event the informers deliver after the comparison (the scheduler's
// handler still processing it) must not make the later checks pass: the
// moment waits for the next round, where the comparison covers it.
func TestUnsettledReadsOneSnapshot(t *testing.T) {
	const node = "n1"
	for _, tc := range []struct {
		name string
		// a job's pod on node "n1" has been deleted by the replay; before
		// says whether the informers have delivered its deletion (and the
		// exporter's object without it) before the check.
		deliverAfter string
		before       bool
		want         string // a substring; "" for settled
	}{
		{name: "everything delivered before the check", before: true, want: ""},
		{name: "pod deletion delivered after the pods were compared", deliverAfter: "pods", want: "pod a, deleted, is still there"},
		{name: "node's object delivered after the objects were compared", deliverAfter: "objects", want: "node n1: its NodeResourceTopology counts another pod set"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			deleted := runningPod("a", node)
			podStore := cache.NewStore(cache.MetaNamespaceKeyFunc)
			nrtStore := cache.NewStore(cache.MetaNamespaceKeyFunc)
			podView := schedulerrun.NewView(nil)
			nrtView := schedulerrun.NewView(nil)
			set := func(store cache.Store, view *schedulerrun.View, obj any) {
				if err := store.Add(obj); err != nil {
					t.Fatal(err)
				}
				view.Set(obj)
			}
			deletePod := func() {
				if err := podStore.Delete(deleted); err != nil {
					t.Fatal(err)
				}
				podView.Delete(deleted)
			}
			freeNode := func() { set(nrtStore, nrtView, nodeObject(node, "2")) }
			fake := &fakeStepper{pending: map[types.UID]bool{}, deliverAfter: tc.deliverAfter}
			switch {
			case tc.before:
				freeNode()
			case tc.deliverAfter == "pods":
				// The exporter already wrote the node without the pod; the
				// pod's deletion reaches the informers mid-check.
				set(podStore, podView, deleted)
				freeNode()
				fake.deliver = deletePod
			case tc.deliverAfter == "objects":
				// The pod is gone everywhere; the node's new object reaches
				// the informers mid-check.
				set(nrtStore, nrtView, nodeObject(node, "1", deleted))
				fake.deliver = freeNode
			}
			r := &replayer{
				sched: fake, col: columnNamed("required+proxy"), p: &Plan{info: []nodeInfo{{Name: node}}}, alive: map[string]bool{},
				podStore: podStore, nrtStore: nrtStore, groupStore: cache.NewStore(cache.MetaNamespaceKeyFunc),
				podView: podView, nrtView: nrtView, groupView: schedulerrun.NewView(nil),
			}
			got := r.unsettled(true)
			if tc.want == "" && got != "" || !strings.Contains(got, tc.want) {
				t.Errorf("unsettled() = %q, want %q", got, tc.want)
			}
		})
	}
}

// TestGroupsBehindServer: in a gang column a moment waits until the
// replay's PodGroup view holds every PodGroup write the apiserver has
// taken (a failed attempt's status), and other columns never list.
func TestGroupsBehindServer(t *testing.T) {
	group := func(rv string) *schedulingv1beta1.PodGroup {
		return &schedulingv1beta1.PodGroup{ObjectMeta: metav1.ObjectMeta{Name: "job-1", Namespace: "default", ResourceVersion: rv}}
	}
	for _, tc := range []struct {
		name   string
		gang   bool
		server *schedulingv1beta1.PodGroup
		viewed *schedulingv1beta1.PodGroup // nil: the view is empty
		behind bool
	}{
		{name: "the view holds the server's write", gang: true, server: group("2"), viewed: group("2")},
		{name: "a status write not yet seen", gang: true, server: group("2"), viewed: group("1"), behind: true},
		{name: "a group created, not yet seen", gang: true, server: group("1"), behind: true},
		{name: "not a gang column", server: group("2"), viewed: group("1")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			view := schedulerrun.NewView(nil)
			if tc.viewed != nil {
				view.Set(tc.viewed)
			}
			r := &replayer{ctx: context.Background(), col: Column{Name: "gangs", Gang: tc.gang}, groupView: view,
				cp: &controlplane.ControlPlane{Kube: fake.NewClientset(tc.server)}}
			why, err := r.groupsBehindServer()
			if err != nil {
				t.Fatal(err)
			}
			if got := why != ""; got != tc.behind {
				t.Errorf("groupsBehindServer() = %q, want behind %v", why, tc.behind)
			}
		})
	}
}
