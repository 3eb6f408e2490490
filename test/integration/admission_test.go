package integration

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	nrtv1alpha2 "github.com/k8stopologyawareschedwg/noderesourcetopology-api/pkg/apis/topology/v1alpha2"
	admissionv1 "k8s.io/api/admissionregistration/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/yaml"

	"github.com/nicaffinity/nicaffinity/internal/controlplane"
	"github.com/nicaffinity/nicaffinity/manifests"
	"github.com/nicaffinity/nicaffinity/pkg/annotations"
	"github.com/nicaffinity/nicaffinity/pkg/exporter"
	"github.com/nicaffinity/nicaffinity/pkg/nrt/nrttest"
)

// TestAdmissionPolicies runs the shipped ValidatingAdmissionPolicies on a
// real apiserver against requests made with real service-account tokens:
// the exporter's token is bound to its pod on node-a, so the apiserver
// puts node-a in the token's identity, which is all the policies trust.
func TestAdmissionPolicies(t *testing.T) {
	cp := controlplane.Start(t)
	ctx := context.Background()
	installPolicies(t, cp.Kube)
	const schedNS, nodeNS = "nicaffinity-system", "nicaffinity-node"
	for ns, sa := range map[string]string{schedNS: "nicaffinity-scheduler", nodeNS: "topology-exporter"} {
		mustCreate(t, func() error {
			_, err := cp.Kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
			return err
		})
		mustCreate(t, func() error {
			_, err := cp.Kube.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: sa}}, metav1.CreateOptions{})
			return err
		})
	}
	for _, n := range []string{"node-a", "node-b"} {
		mustCreate(t, func() error {
			_, err := cp.Kube.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n}}, metav1.CreateOptions{})
			return err
		})
	}
	pod := func(ns, name, node, sa string) *corev1.Pod {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: map[string]string{"app": name}},
			Spec: corev1.PodSpec{NodeName: node, ServiceAccountName: sa, Containers: []corev1.Container{{Name: "c", Image: "registry.example/app:1",
				Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("1")}}}}}}
		got, err := cp.Kube.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return got
	}
	exporterPod := pod(nodeNS, "exporter-a", "node-a", "topology-exporter")
	pod("default", "work-a", "node-a", "")
	pod("default", "work-b", "node-b", "")

	exp := clientFor(t, cp, nodeNS, "topology-exporter", &authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: exporterPod.Name, UID: exporterPod.UID})
	sched := clientFor(t, cp, schedNS, "nicaffinity-scheduler", nil)
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
	patch := func(c kubernetes.Interface, ns, name string, p map[string]any) error {
		b, _ := json.Marshal(p)
		_, err := c.CoreV1().Pods(ns).Patch(ctx, name, types.StrategicMergePatchType, b, metav1.PatchOptions{})
		return err
	}
	ann := func(k, v string) map[string]any {
		return map[string]any{"metadata": map[string]any{"annotations": map[string]string{k: v}}}
	}
	observed := ann(annotations.ObservedKey, `{"plan":"matched"}`)
	lease := func(c kubernetes.Interface, ns, name string) error {
		holder := "nicaffinity-scheduler-0"
		_, err := c.CoordinationV1().Leases(ns).Create(ctx, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
			Spec: coordinationv1.LeaseSpec{HolderIdentity: &holder}}, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
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
		"nicaffinity-pod-outputs":           func() error { return dryPatch(cp.Kube, "work-b", observed) },
		"nicaffinity-scheduler-own-lease":   func() error { return lease(sched.kube, "kube-system", "kube-scheduler") },
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
			return apierrors.IsForbidden(err) || apierrors.IsInvalid(err), nil
		}); err != nil {
			t.Fatalf("the admission policy %s did not refuse its probe within 60 s: %v", name, probe())
		}
	}

	for _, tc := range []struct {
		name string
		do   func() error
		// want is "" for allowed, else a piece of the refusal (pieces
		// separated by | when two policies refuse it, in either order).
		want string
	}{
		{"exporter A applies node A's object", func() error { return apply("node-a") }, ""},
		{"exporter A applies node B's object", func() error { return apply("node-b") }, "may write only the NodeResourceTopology named after it"},
		{"exporter A annotates observed on a pod on node A", func() error { return patch(exp.kube, "default", "work-a", observed) }, ""},
		{"exporter A annotates observed on a pod on node B", func() error { return patch(exp.kube, "default", "work-b", observed) }, "may change only pods on that node"},
		{"exporter A relabels a pod on node A", func() error {
			return patch(exp.kube, "default", "work-a", map[string]any{"metadata": map[string]any{"labels": map[string]string{"app": "evil"}}})
		}, "only the nicaffinity.io/observed annotation"},
		{"exporter A changes a pod's image on node A", func() error {
			return patch(exp.kube, "default", "work-a", map[string]any{"spec": map[string]any{"containers": []map[string]any{{"name": "c", "image": "evil/miner:1"}}}})
		}, "only the nicaffinity.io/observed annotation"},
		{"exporter A writes a plan on a pod on node A", func() error {
			return patch(exp.kube, "default", "work-a", ann(annotations.AllocationKey, `{"node":"node-a","gpus":["0000:10:00.0"]}`))
		}, "only the nicaffinity.io/observed annotation|only the nicaffinity scheduler may set nicaffinity.io/allocation"},
		{"exporter A deletes a pod on node A", func() error {
			return exp.kube.CoreV1().Pods("default").Delete(ctx, "work-a", metav1.DeleteOptions{DryRun: []string{metav1.DryRunAll}})
		}, "may only annotate pods"},
		{"a tenant creates a pod with a plan", func() error {
			p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "squatter", Namespace: "default",
				Annotations: map[string]string{annotations.AllocationKey: `{"node":"node-a","gpus":["0000:10:00.0","0000:20:00.0"]}`}},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "c"}}}}
			_, err := cp.Kube.CoreV1().Pods("default").Create(ctx, p, metav1.CreateOptions{})
			return err
		}, "only the nicaffinity scheduler may set nicaffinity.io/allocation"},
		{"a tenant writes observed on its pod", func() error { return patch(cp.Kube, "default", "work-b", observed) }, "only the nicaffinity topology exporter may set nicaffinity.io/observed"},
		{"the scheduler writes a plan (annotateAt: PreBind)", func() error {
			return patch(sched.kube, "default", "work-b", ann(annotations.AllocationKey, `{"node":"node-b","gpus":["0000:10:00.0"]}`))
		}, ""},
		{"a tenant changes that plan", func() error {
			return patch(cp.Kube, "default", "work-b", ann(annotations.AllocationKey, `{"node":"node-b","gpus":["0000:10:00.0","0000:20:00.0"]}`))
		}, "only the nicaffinity scheduler may set nicaffinity.io/allocation"},
		{"a tenant changes something else on that pod", func() error {
			return patch(cp.Kube, "default", "work-b", ann("team", "blue"))
		}, ""},
		{"anyone publishes a quantity with a huge exponent", func() error {
			o := nrttest.HalfNICs("node-z", 0, 1)
			u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(o)
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
				t.Errorf("got %v, want a 403 saying %q", err, tc.want)
			}
		})
	}
}

// installPolicies creates the shipped policies and bindings.
func installPolicies(t *testing.T, kube kubernetes.Interface) {
	t.Helper()
	ctx := context.Background()
	for _, doc := range strings.Split(string(manifests.AdmissionPolicies), "\n---\n") {
		var meta metav1.TypeMeta
		if err := yaml.Unmarshal([]byte(doc), &meta); err != nil {
			t.Fatal(err)
		}
		switch meta.Kind {
		case "ValidatingAdmissionPolicy":
			var p admissionv1.ValidatingAdmissionPolicy
			if err := yaml.UnmarshalStrict([]byte(doc), &p); err != nil {
				t.Fatal(err)
			}
			if _, err := kube.AdmissionregistrationV1().ValidatingAdmissionPolicies().Create(ctx, &p, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
		case "ValidatingAdmissionPolicyBinding":
			var b admissionv1.ValidatingAdmissionPolicyBinding
			if err := yaml.UnmarshalStrict([]byte(doc), &b); err != nil {
				t.Fatal(err)
			}
			if _, err := kube.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings().Create(ctx, &b, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
		default:
			t.Fatalf("unexpected kind %q in admission-policies.yaml", meta.Kind)
		}
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

func mustCreate(t *testing.T, f func() error) {
	t.Helper()
	if err := f(); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
}
