package integration

import (
	"context"
	"encoding/json"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	nrtv1alpha2 "github.com/k8stopologyawareschedwg/noderesourcetopology-api/pkg/apis/topology/v1alpha2"
	admissionv1 "k8s.io/api/admissionregistration/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/yaml"

	"github.com/nicaffinity/nicaffinity/internal/controlplane"
	"github.com/nicaffinity/nicaffinity/manifests"
	"github.com/nicaffinity/nicaffinity/pkg/annotations"
	"github.com/nicaffinity/nicaffinity/pkg/exporter"
	"github.com/nicaffinity/nicaffinity/pkg/nrt/nrttest"
)

// Static identities of the trust test: a kubelet (the Node authorizer and
// NodeRestriction know it by its user and group), the default scheduler
// (bound to system:kube-scheduler by the apiserver's own RBAC), an
// operator allowed to bind pods and write their status, and a tenant
// allowed to create and patch pods.
var trustTokens = []controlplane.StaticToken{
	{Token: "kubelet-a-token", User: "system:node:node-a", Groups: []string{"system:nodes"}},
	{Token: "default-scheduler-token", User: "system:kube-scheduler"},
	{Token: "operator-token", User: "operator"},
	{Token: "tenant-token", User: "tenant"},
}

// TestAdmissionPolicies runs the shipped ValidatingAdmissionPolicies and
// RBAC on a control plane authorized as production clusters are (Node and
// RBAC authorizers, NodeRestriction), against requests made with real
// identities: the exporter's token is bound to its pod on node-a, so the
// apiserver puts node-a in the token's identity, which is all the policies
// trust; the scheduler has its service account's token; the kubelet, the
// default scheduler, an operator and a tenant have static tokens. Every
// forgery of a plan or of observed is refused through every path that can
// carry pod metadata (pods, pods/binding, bindings, pods/status; create
// and update), and every legitimate writer still works.
func TestAdmissionPolicies(t *testing.T) {
	cp := controlplane.Start(t, controlplane.WithAuthorization(trustTokens...))
	ctx := context.Background()
	const schedNS, nodeNS = "nicaffinity-system", "nicaffinity-node"
	for _, ns := range []string{schedNS, nodeNS} {
		mustCreate(t, func() error {
			_, err := cp.Kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
			return err
		})
	}
	// The shipped RBAC, the PreBind option's included, and the roles of
	// the static identities.
	for _, f := range []string{"rbac-exporter.yaml", "rbac-scheduler.yaml", "allocation-proxy/rbac.yaml", "optional/rbac-scheduler-prebind.yaml"} {
		b, err := os.ReadFile("../../manifests/" + f)
		if err != nil {
			t.Fatal(err)
		}
		installObjects(t, cp.Kube, b)
	}
	grant(t, cp.Kube, "operator", []rbacv1.PolicyRule{
		{APIGroups: []string{""}, Resources: []string{"bindings", "pods/binding"}, Verbs: []string{"create"}},
		{APIGroups: []string{""}, Resources: []string{"pods/status"}, Verbs: []string{"get", "patch", "update"}},
		{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"get"}},
	})
	grant(t, cp.Kube, "tenant", []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"get", "create", "patch", "update"}}})
	installPolicies(t, cp.Kube)
	for _, n := range []string{"node-a", "node-b"} {
		mustCreate(t, func() error {
			_, err := cp.Kube.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n}}, metav1.CreateOptions{})
			return err
		})
	}
	pod := func(ns, name, node, sa string) *corev1.Pod {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: map[string]string{"app": name}},
			Spec: corev1.PodSpec{NodeName: node, ServiceAccountName: sa, SchedulerName: "nicaffinity-scheduler",
				Containers: []corev1.Container{{Name: "c", Image: "registry.example/app:1",
					Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("1")}}}}}}
		got, err := cp.Kube.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return got
	}
	exporterPod := pod(nodeNS, "exporter-a", "node-a", "topology-exporter")
	pod("kube-system", "coredns", "node-b", "")
	pod("default", "work-a", "node-a", "")
	pod("default", "work-b", "node-b", "")
	pod("default", "plain-a", "node-a", "") // never carries nicaffinity's outputs
	pod("default", "planned", "", "")       // the nicaffinity scheduler binds it to node-a with a plan
	pod("default", "prebind", "", "")       // annotateAt: PreBind writes its plan before it binds
	pod("default", "unplanned", "", "")     // the default scheduler binds it, without a plan
	pod("default", "victim", "", "")        // forged Bindings aim at it (dry runs)

	exp := clientFor(t, cp, nodeNS, "topology-exporter", &authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: exporterPod.Name, UID: exporterPod.UID})
	sched := clientFor(t, cp, schedNS, "nicaffinity-scheduler", nil)
	kubelet, defaultSched, operator, tenant := tokenClient(t, cp, "kubelet-a-token"), tokenClient(t, cp, "default-scheduler-token"),
		tokenClient(t, cp, "operator-token"), tokenClient(t, cp, "tenant-token")
	dyn, err := dynamic.NewForConfig(controlplane.JSONConfig(cp.Config))
	if err != nil {
		t.Fatal(err)
	}
	nrtGVR := nrtv1alpha2.SchemeGroupVersion.WithResource("noderesourcetopologies")
	expNRT, err := exporter.NewClient(exp.config)
	if err != nil {
		t.Fatal(err)
	}
	apply := func(node string) error {
		return exporter.ApplyPublisher{Client: expNRT}.Publish(ctx, nrttest.HalfNICs(node, 0, 1))
	}
	patchSub := func(c kubernetes.Interface, ns, name string, p map[string]any, sub ...string) error {
		b, _ := json.Marshal(p)
		_, err := c.CoreV1().Pods(ns).Patch(ctx, name, types.StrategicMergePatchType, b, metav1.PatchOptions{}, sub...)
		return err
	}
	patch := func(c kubernetes.Interface, ns, name string, p map[string]any) error { return patchSub(c, ns, name, p) }
	ann := func(k, v string) map[string]any {
		return map[string]any{"metadata": map[string]any{"annotations": map[string]any{k: v}}}
	}
	removeAnn := func(k string) map[string]any {
		return map[string]any{"metadata": map[string]any{"annotations": map[string]any{k: nil}}}
	}
	planFor := func(node string, gpus ...string) string {
		return annotations.Marshal(&annotations.Allocation{Node: node, GPUs: gpus})
	}
	observed := ann(annotations.ObservedKey, `{"plan":"matched"}`)
	condition := map[string]any{"status": map[string]any{"conditions": []map[string]any{{"type": "Ready", "status": "True"}}}}
	// bind POSTs a Binding through pods/binding, or the legacy bindings
	// resource (POST /api/v1/namespaces/NS/bindings) when legacy is set.
	bind := func(c kubernetes.Interface, name, node, plan string, legacy, dry bool) error {
		b := &corev1.Binding{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"}, Target: corev1.ObjectReference{Kind: "Node", Name: node}}
		if plan != "" {
			b.Annotations = map[string]string{annotations.AllocationKey: plan}
		}
		opts := metav1.CreateOptions{}
		if dry {
			opts.DryRun = []string{metav1.DryRunAll}
		}
		if !legacy {
			return c.CoreV1().Pods("default").Bind(ctx, b, opts)
		}
		req := c.CoreV1().RESTClient().Post().Namespace("default").Resource("bindings").Body(b)
		if dry {
			req = req.Param("dryRun", metav1.DryRunAll)
		}
		return req.Do(ctx).Error()
	}
	// statusPut replaces the pod's status (and metadata) with a PUT to
	// pods/status, as a controller's UpdateStatus does.
	statusPut := func(c kubernetes.Interface, name string, mutate func(*corev1.Pod)) error {
		p, err := c.CoreV1().Pods("default").Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		mutate(p)
		_, err = c.CoreV1().Pods("default").UpdateStatus(ctx, p, metav1.UpdateOptions{})
		return err
	}
	lease := func(c kubernetes.Interface, ns, name string) error {
		holder := "nicaffinity-scheduler-0"
		_, err := c.CoordinationV1().Leases(ns).Create(ctx, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
			Spec: coordinationv1.LeaseSpec{HolderIdentity: &holder}}, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		return err
	}
	coreEvent := func(c kubernetes.Interface, ns, kind, name, reason string) error {
		_, err := c.CoreV1().Events(ns).Create(ctx, &corev1.Event{ObjectMeta: metav1.ObjectMeta{GenerateName: "e-", Namespace: ns},
			InvolvedObject: corev1.ObjectReference{Kind: kind, Namespace: ns, Name: name}, Reason: reason, Message: "m", Type: corev1.EventTypeNormal,
			Source: corev1.EventSource{Component: "nicaffinity-topology-exporter"}}, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		return err
	}
	newEvent := func(c kubernetes.Interface, ns, kind, name, reason string) error {
		_, err := c.EventsV1().Events(ns).Create(ctx, &eventsv1.Event{ObjectMeta: metav1.ObjectMeta{GenerateName: "e-", Namespace: ns},
			Regarding: corev1.ObjectReference{Kind: kind, Namespace: ns, Name: name}, Reason: reason, Note: "m", Type: corev1.EventTypeNormal,
			Action: "Observe", EventTime: metav1.NowMicro(), ReportingController: "nicaffinity.io/topology-exporter", ReportingInstance: "node-a"},
			metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		return err
	}

	// The policies load asynchronously, each on its own (a busy machine
	// compiles one policy's CEL well after another's): wait until every
	// one bites, with dry runs that change nothing.
	dryPatch := func(c kubernetes.Interface, name string, p map[string]any) error {
		b, _ := json.Marshal(p)
		_, err := c.CoreV1().Pods("default").Patch(ctx, name, types.StrategicMergePatchType, b, metav1.PatchOptions{DryRun: []string{metav1.DryRunAll}})
		return err
	}
	probes := map[string]func() error{
		"nicaffinity-exporter-own-topology": func() error { return apply("node-b") },
		"nicaffinity-exporter-own-pods":     func() error { return dryPatch(exp.kube, "work-b", observed) },
		"nicaffinity-pod-outputs":           func() error { return dryPatch(tenant, "work-b", observed) },
		"nicaffinity-scheduler-own-lease":   func() error { return lease(sched.kube, "kube-system", "kube-scheduler") },
		"nicaffinity-node-events":           func() error { return coreEvent(exp.kube, "kube-system", "Pod", "coredns", "Killing") },
		"nicaffinity-topology-bounds": func() error {
			u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(nrttest.HalfNICs("node-probe", 0, 1))
			if err != nil {
				return err
			}
			zones := u["zones"].([]any)
			zones[len(zones)-3].(map[string]any)["resources"].([]any)[0].(map[string]any)["available"] = "1e10000"
			_, err = dyn.Resource(nrtGVR).Create(ctx, &unstructured.Unstructured{Object: u}, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
			return err
		},
	}
	for name, probe := range probes {
		if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 60*time.Second, true, func(context.Context) (bool, error) {
			err := probe()
			return (apierrors.IsForbidden(err) || apierrors.IsInvalid(err)) && strings.Contains(err.Error(), "ValidatingAdmissionPolicy"), nil
		}); err != nil {
			t.Fatalf("the admission policy %s did not refuse its probe within 60 s: %v", name, probe())
		}
	}

	const refusedByRBAC = "is forbidden: User"
	for _, tc := range []struct {
		name string
		do   func() error
		// want is "" for allowed, else a piece of the refusal (pieces
		// separated by | when either may refuse it).
		want string
	}{
		// The exporter.
		{"exporter A applies node A's object", func() error { return apply("node-a") }, ""},
		{"exporter A applies node B's object", func() error { return apply("node-b") }, "may write only the NodeResourceTopology named after it"},
		{"exporter A annotates observed on a pod on node A", func() error { return patch(exp.kube, "default", "work-a", observed) }, ""},
		{"exporter A annotates observed on a pod on node B", func() error { return patch(exp.kube, "default", "work-b", observed) },
			"may change only pods on that node|exporter of the pod's node may set nicaffinity.io/observed"},
		{"exporter A relabels a pod on node A", func() error {
			return patch(exp.kube, "default", "work-a", map[string]any{"metadata": map[string]any{"labels": map[string]string{"app": "evil"}}})
		}, "only the nicaffinity.io/observed annotation"},
		{"exporter A changes a pod's image on node A", func() error {
			return patch(exp.kube, "default", "work-a", map[string]any{"spec": map[string]any{"containers": []map[string]any{{"name": "c", "image": "evil/miner:1"}}}})
		}, "only the nicaffinity.io/observed annotation|spec: Forbidden"},
		{"exporter A writes a plan on a pod on node A", func() error {
			return patch(exp.kube, "default", "work-a", ann(annotations.AllocationKey, planFor("node-a", "0000:10:00.0")))
		}, "only the nicaffinity.io/observed annotation|only the nicaffinity scheduler may set nicaffinity.io/allocation"},
		{"exporter A writes observed through pods/status", func() error { return patchSub(exp.kube, "default", "work-a", observed, "status") }, refusedByRBAC},
		{"exporter A deletes a pod on node A", func() error {
			return exp.kube.CoreV1().Pods("default").Delete(ctx, "work-a", metav1.DeleteOptions{DryRun: []string{metav1.DryRunAll}})
		}, "may only annotate pods|" + refusedByRBAC},

		// Plans: the legitimate paths first.
		{"the scheduler binds a pod with its plan (pods/binding)", func() error {
			return bind(sched.kube, "planned", "node-a", planFor("node-a", "0000:10:00.0"), false, false)
		}, ""},
		{"the scheduler writes a plan before binding (annotateAt: PreBind)", func() error {
			return patch(sched.kube, "default", "prebind", ann(annotations.AllocationKey, planFor("node-a", "0000:10:00.0")))
		}, ""},
		{"the scheduler writes a new plan while the pod is unbound (a retried bind)", func() error {
			return patch(sched.kube, "default", "prebind", ann(annotations.AllocationKey, planFor("node-a", "0000:20:00.0")))
		}, ""},
		{"the default scheduler binds a pod without a plan (bindings)", func() error { return bind(defaultSched, "unplanned", "node-b", "", true, false) }, ""},
		{"the exporter of the pod's node writes observed on a planned pod", func() error { return patch(exp.kube, "default", "planned", observed) }, ""},
		{"the exporter rewrites observed when the kubelet's answer changes", func() error {
			return patch(exp.kube, "default", "planned", ann(annotations.ObservedKey, `{"plan":"not followed"}`))
		}, ""},
		{"the exporter of the pod's node writes an observed value past the parsers' bound", func() error {
			return patch(exp.kube, "default", "planned", ann(annotations.ObservedKey, `{"plan":"`+strings.Repeat("x", annotations.MaxValueBytes)+`"}`))
		}, "nicaffinity.io/observed is larger than 16384 bytes"},
		{"the kubelet updates a planned pod's status", func() error { return patchSub(kubelet, "default", "planned", condition, "status") }, ""},
		{"the kubelet updates a plain pod's status", func() error { return patchSub(kubelet, "default", "work-a", condition, "status") }, ""},
		{"a tenant changes something else on a planned pod", func() error { return patch(tenant, "default", "planned", ann("team", "blue")) }, ""},

		// Plans: forgeries, through every path.
		{"a tenant creates a pod with a plan", func() error {
			p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "squatter", Namespace: "default",
				Annotations: map[string]string{annotations.AllocationKey: planFor("node-a", "0000:10:00.0", "0000:20:00.0")}},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "c"}}}}
			_, err := tenant.CoreV1().Pods("default").Create(ctx, p, metav1.CreateOptions{})
			return err
		}, "only the nicaffinity scheduler may set nicaffinity.io/allocation"},
		{"a tenant patches a plan onto an unbound pod", func() error {
			return patch(tenant, "default", "victim", ann(annotations.AllocationKey, planFor("node-a", "0000:10:00.0")))
		}, "only the nicaffinity scheduler may set nicaffinity.io/allocation"},
		{"a tenant changes a bound pod's plan", func() error {
			return patch(tenant, "default", "planned", ann(annotations.AllocationKey, planFor("node-a", "0000:10:00.0", "0000:20:00.0")))
		}, "only the nicaffinity scheduler may set nicaffinity.io/allocation"},
		{"a tenant removes a bound pod's plan", func() error { return patch(tenant, "default", "planned", removeAnn(annotations.AllocationKey)) },
			"only the nicaffinity scheduler may set nicaffinity.io/allocation"},
		{"a tenant replaces a planned pod whole (PUT) without its plan", func() error {
			p, err := tenant.CoreV1().Pods("default").Get(ctx, "planned", metav1.GetOptions{})
			if err != nil {
				return err
			}
			delete(p.Annotations, annotations.AllocationKey)
			_, err = tenant.CoreV1().Pods("default").Update(ctx, p, metav1.UpdateOptions{})
			return err
		}, "only the nicaffinity scheduler may set nicaffinity.io/allocation"},
		{"the scheduler changes a bound pod's plan", func() error {
			return patch(sched.kube, "default", "planned", ann(annotations.AllocationKey, planFor("node-a", "0000:30:00.0")))
		}, "of a pod bound to a node cannot be changed or removed"},
		{"the default scheduler binds with a plan (bindings)", func() error {
			return bind(defaultSched, "victim", "node-a", planFor("node-a", "0000:10:00.0"), true, true)
		},
			"only the nicaffinity scheduler may set nicaffinity.io/allocation"},
		{"the default scheduler binds with a plan (pods/binding)", func() error {
			return bind(defaultSched, "victim", "node-a", planFor("node-a", "0000:10:00.0"), false, true)
		}, "only the nicaffinity scheduler may set nicaffinity.io/allocation"},
		{"an operator binds with a plan (bindings)", func() error { return bind(operator, "victim", "node-a", planFor("node-a", "0000:10:00.0"), true, true) },
			"only the nicaffinity scheduler may set nicaffinity.io/allocation"},
		{"an operator adds a plan through pods/status (merge patch)", func() error {
			return patchSub(operator, "default", "victim", ann(annotations.AllocationKey, planFor("node-a", "0000:10:00.0")), "status")
		}, "only the nicaffinity scheduler may set nicaffinity.io/allocation"},
		{"an operator changes a plan through pods/status (PUT)", func() error {
			return statusPut(operator, "planned", func(p *corev1.Pod) { p.Annotations[annotations.AllocationKey] = planFor("node-a", "0000:40:00.0") })
		}, "only the nicaffinity scheduler may set nicaffinity.io/allocation"},
		{"an operator adds observed through pods/status (PUT)", func() error {
			return statusPut(operator, "work-b", func(p *corev1.Pod) {
				if p.Annotations == nil {
					p.Annotations = map[string]string{}
				}
				p.Annotations[annotations.ObservedKey] = `{"plan":"matched"}`
			})
		}, "only the nicaffinity topology exporter of the pod's node may set nicaffinity.io/observed"},
		{"the kubelet adds a plan through pods/status", func() error {
			return patchSub(kubelet, "default", "work-a", ann(annotations.AllocationKey, planFor("node-a", "0000:10:00.0")), "status")
		}, "only the nicaffinity scheduler may set nicaffinity.io/allocation"},
		{"the kubelet changes a plan through pods/status", func() error {
			return patchSub(kubelet, "default", "planned", ann(annotations.AllocationKey, planFor("node-a", "0000:50:00.0")), "status")
		}, "only the nicaffinity scheduler may set nicaffinity.io/allocation"},
		{"the kubelet writes observed through pods/status", func() error {
			return patchSub(kubelet, "default", "work-a", ann(annotations.ObservedKey, `{"plan":"forged"}`), "status")
		},
			"only the nicaffinity topology exporter of the pod's node may set nicaffinity.io/observed"},

		// Observed.
		{"a tenant writes observed on its pod", func() error { return patch(tenant, "default", "work-b", observed) }, "only the nicaffinity topology exporter of the pod's node may set nicaffinity.io/observed"},
		{"a tenant changes observed", func() error { return patch(tenant, "default", "planned", observed) }, "only the nicaffinity topology exporter of the pod's node may set nicaffinity.io/observed"},
		{"a tenant removes observed", func() error { return patch(tenant, "default", "planned", removeAnn(annotations.ObservedKey)) }, "may set nicaffinity.io/observed"},
		{"the exporter removes observed", func() error { return patch(exp.kube, "default", "planned", removeAnn(annotations.ObservedKey)) }, "nicaffinity.io/observed cannot be removed"},

		// Events.
		{"exporter A reports Aligned on a pod", func() error { return coreEvent(exp.kube, "default", "Pod", "work-a", "Aligned") }, ""},
		{"exporter A reports on its own Node", func() error { return coreEvent(exp.kube, "default", "Node", "node-a", "TopologyPublished") }, ""},
		{"exporter A forges Killing for a kube-system pod", func() error { return coreEvent(exp.kube, "kube-system", "Pod", "coredns", "Killing") },
			"may write Events only with its own reasons"},
		{"exporter A forges Killing through events.k8s.io", func() error { return newEvent(exp.kube, "kube-system", "Pod", "coredns", "Killing") },
			"may write Events only with its own reasons"},
		{"exporter A reports on node B", func() error { return coreEvent(exp.kube, "default", "Node", "node-b", "TopologyPublished") },
			"may write Events only about pods and its own Node, not Node 'node-b'"},
		{"exporter A reports on a Secret", func() error { return newEvent(exp.kube, "default", "Secret", "s", "Aligned") }, "only about pods and its own Node"},

		// NodeResourceTopology bounds, for every writer.
		{"anyone publishes a quantity with a huge exponent", func() error {
			u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(nrttest.HalfNICs("node-z", 0, 1))
			if err != nil {
				return err
			}
			zones := u["zones"].([]any)
			zones[len(zones)-3].(map[string]any)["resources"].([]any)[0].(map[string]any)["available"] = "12345678901234567890e1000000000"
			start := time.Now()
			_, err = dyn.Resource(nrtGVR).Create(ctx, &unstructured.Unstructured{Object: u}, metav1.CreateOptions{})
			if took := time.Since(start); took > 5*time.Second { // a hang guard, not a speed goal
				t.Errorf("refusing it took %s", took)
			}
			return err
		}, "quantities may have at most 64 characters and exponents of at most 3 digits"},
		{"anyone publishes a zone with too many costs", func() error {
			o := nrttest.HalfNICs("node-z", 0, 1)
			for i := 0; i < 129; i++ {
				o.Zones[0].Costs = append(o.Zones[0].Costs, nrtv1alpha2.CostInfo{Name: "node-0", Value: 10})
			}
			u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(o)
			if err != nil {
				return err
			}
			_, err = dyn.Resource(nrtGVR).Create(ctx, &unstructured.Unstructured{Object: u}, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
			return err
		}, "at most 128 costs"},
		{"anyone publishes the largest object the caps admit", func() error {
			u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(nrttest.Largest("node-big"))
			if err != nil {
				return err
			}
			_, err = dyn.Resource(nrtGVR).Create(ctx, &unstructured.Unstructured{Object: u}, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
			return err
		}, ""},

		// Leases.
		{"the scheduler takes its own lease", func() error { return lease(sched.kube, schedNS, "nicaffinity-scheduler") }, ""},
		{"the scheduler takes the default scheduler's lease", func() error { return lease(sched.kube, "kube-system", "kube-scheduler") },
			"may write only its own lease nicaffinity-system/nicaffinity-scheduler, not kube-system/kube-scheduler"},
		{"the scheduler creates another lease", func() error { return lease(sched.kube, schedNS, "other") }, "may write only its own lease"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.do()
			switch {
			case tc.want == "" && err != nil:
				t.Errorf("refused: %v", err)
			case tc.want != "" && (!(apierrors.IsForbidden(err) || apierrors.IsInvalid(err)) || !slices.ContainsFunc(strings.Split(tc.want, "|"), func(w string) bool { return strings.Contains(err.Error(), w) })):
				t.Errorf("got %v, want a refusal saying %q", err, tc.want)
			}
		})
	}
	got, err := cp.Kube.CoreV1().Pods("default").Get(ctx, "planned", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if want := planFor("node-a", "0000:10:00.0"); got.Spec.NodeName != "node-a" || got.Annotations[annotations.AllocationKey] != want {
		t.Errorf("the planned pod: node %q, plan %q; want node-a and the scheduler's plan %s", got.Spec.NodeName, got.Annotations[annotations.AllocationKey], want)
	}

	// matchConditions: a status write of a pod without nicaffinity's
	// outputs is not evaluated at all. A copy of the pod-outputs policy
	// whose only validation refuses everything shows it: it refuses a
	// status write of a planned pod and lets a plain one through.
	probe := podOutputsPolicy(t)
	probe.Name = "nicaffinity-pod-outputs-probe"
	probe.Spec.Validations = []admissionv1.Validation{{Expression: "false", Message: "evaluated"}}
	if _, err := cp.Kube.AdmissionregistrationV1().ValidatingAdmissionPolicies().Create(ctx, probe, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cp.Kube.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings().Create(ctx, &admissionv1.ValidatingAdmissionPolicyBinding{
		ObjectMeta: metav1.ObjectMeta{Name: probe.Name}, Spec: admissionv1.ValidatingAdmissionPolicyBindingSpec{PolicyName: probe.Name, ValidationActions: []admissionv1.ValidationAction{admissionv1.Deny}}},
		metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 60*time.Second, true, func(context.Context) (bool, error) {
		err := patchSub(kubelet, "default", "planned", condition, "status")
		return err != nil && strings.Contains(err.Error(), "evaluated"), nil
	}); err != nil {
		t.Fatalf("the probe policy never evaluated a planned pod's status write: %v", err)
	}
	if err := patchSub(kubelet, "default", "plain-a", condition, "status"); err != nil {
		t.Errorf("a plain pod's status write was evaluated: %v", err)
	}
}

// podOutputsPolicyYAML is the shipped nicaffinity-pod-outputs policy and
// its binding.
func podOutputsPolicyYAML(t testing.TB) []byte {
	t.Helper()
	var out []string
	for _, doc := range strings.Split(string(manifests.AdmissionPolicies), "\n---\n") {
		if strings.Contains(doc, "\n  name: nicaffinity-pod-outputs\n") {
			out = append(out, doc)
		}
	}
	if len(out) != 2 {
		t.Fatalf("%d documents named nicaffinity-pod-outputs, want the policy and its binding", len(out))
	}
	return []byte(strings.Join(out, "\n---\n"))
}

// podOutputsPolicy is the shipped nicaffinity-pod-outputs policy.
func podOutputsPolicy(t *testing.T) *admissionv1.ValidatingAdmissionPolicy {
	t.Helper()
	for _, doc := range strings.Split(string(manifests.AdmissionPolicies), "\n---\n") {
		var p admissionv1.ValidatingAdmissionPolicy
		if err := yaml.Unmarshal([]byte(doc), &p); err == nil && p.Kind == "ValidatingAdmissionPolicy" && p.Name == "nicaffinity-pod-outputs" {
			return &p
		}
	}
	t.Fatal("no nicaffinity-pod-outputs policy in admission-policies.yaml")
	return nil
}

// installPolicies creates the shipped policies and bindings.
func installPolicies(t testing.TB, kube kubernetes.Interface) {
	t.Helper()
	installObjects(t, kube, manifests.AdmissionPolicies)
}

// installObjects creates the objects of a multi-document YAML file: the
// kinds nicaffinity's manifests hold.
func installObjects(t testing.TB, kube kubernetes.Interface, b []byte) {
	t.Helper()
	ctx := context.Background()
	for _, doc := range strings.Split(string(b), "\n---\n") {
		if strings.TrimSpace(strings.Trim(doc, "-\n")) == "" || !strings.Contains(doc, "kind:") {
			continue
		}
		js, err := yaml.YAMLToJSONStrict([]byte(doc))
		if err != nil {
			t.Fatal(err)
		}
		obj, _, err := scheme.Codecs.UniversalDeserializer().Decode(js, nil, nil)
		if err != nil {
			t.Fatalf("decoding %s: %v", doc, err)
		}
		switch o := obj.(type) {
		case *admissionv1.ValidatingAdmissionPolicy:
			_, err = kube.AdmissionregistrationV1().ValidatingAdmissionPolicies().Create(ctx, o, metav1.CreateOptions{})
		case *admissionv1.ValidatingAdmissionPolicyBinding:
			_, err = kube.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings().Create(ctx, o, metav1.CreateOptions{})
		case *corev1.ServiceAccount:
			_, err = kube.CoreV1().ServiceAccounts(o.Namespace).Create(ctx, o, metav1.CreateOptions{})
		case *rbacv1.ClusterRole:
			_, err = kube.RbacV1().ClusterRoles().Create(ctx, o, metav1.CreateOptions{})
		case *rbacv1.ClusterRoleBinding:
			_, err = kube.RbacV1().ClusterRoleBindings().Create(ctx, o, metav1.CreateOptions{})
		case *rbacv1.Role:
			_, err = kube.RbacV1().Roles(o.Namespace).Create(ctx, o, metav1.CreateOptions{})
		case *rbacv1.RoleBinding:
			_, err = kube.RbacV1().RoleBindings(o.Namespace).Create(ctx, o, metav1.CreateOptions{})
		default:
			t.Fatalf("unexpected kind %T in a manifest", obj)
		}
		if err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
	}
}

// grant binds a cluster role of the given rules to a user.
func grant(t *testing.T, kube kubernetes.Interface, user string, rules []rbacv1.PolicyRule) {
	t.Helper()
	ctx := context.Background()
	if _, err := kube.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "test-" + user}, Rules: rules}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := kube.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "test-" + user},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "test-" + user},
		Subjects: []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: "User", Name: user}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

type saClient struct {
	config *rest.Config
	kube   kubernetes.Interface
}

// clientFor is a client that authenticates with a real token of the
// service account, bound to a pod when bound is set.
func clientFor(t *testing.T, cp *controlplane.ControlPlane, ns, sa string, bound *authenticationv1.BoundObjectReference) saClient {
	t.Helper()
	req := &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: new(int64(3600)), BoundObjectRef: bound}}
	tok, err := cp.Kube.CoreV1().ServiceAccounts(ns).CreateToken(context.Background(), sa, req, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("token for %s/%s: %v", ns, sa, err)
	}
	cfg := rest.AnonymousClientConfig(cp.Config)
	cfg.BearerToken = tok.Status.Token
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return saClient{config: cfg, kube: kube}
}

// tokenClient authenticates with a static token of trustTokens.
func tokenClient(t testing.TB, cp *controlplane.ControlPlane, token string) kubernetes.Interface {
	t.Helper()
	cfg := rest.AnonymousClientConfig(cp.Config)
	cfg.BearerToken = token
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return kube
}

func mustCreate(t *testing.T, f func() error) {
	t.Helper()
	if err := f(); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
}
