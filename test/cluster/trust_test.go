//go:build cluster

package cluster

import (
	"context"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/nicaffinity/nicaffinity/pkg/annotations"
)

// podToken is a token of pod's service account bound to the pod, as the
// kubelet projects it into the pod (node name and pod in its claims).
func (e *env) podToken(pod *corev1.Pod) string {
	e.t.Helper()
	exp := int64(600)
	tr, err := e.c.Kube.CoreV1().ServiceAccounts(pod.Namespace).CreateToken(context.Background(), pod.Spec.ServiceAccountName, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &exp,
			BoundObjectRef: &authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: pod.Name, UID: pod.UID}},
	}, metav1.CreateOptions{})
	if err != nil {
		e.t.Fatalf("a token for pod %s/%s: %v", pod.Namespace, pod.Name, err)
	}
	return tr.Status.Token
}

// as is a client authenticated by token alone.
func (e *env) as(token string) kubernetes.Interface {
	e.t.Helper()
	cfg := rest.AnonymousClientConfig(e.c.Config)
	cfg.Dial = e.c.Dial
	cfg.BearerToken = token
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		e.t.Fatal(err)
	}
	return cs
}

// refused says whether err is the apiserver refusing the request (RBAC
// or admission), not a transport failure.
func refused(err error) bool {
	return err != nil && (strings.Contains(err.Error(), "forbidden") || strings.Contains(err.Error(), "denied") || strings.Contains(err.Error(), "Forbidden"))
}

// TestClusterTrust: with real pod-bound tokens from the running install,
// node gpu-a's exporter can write its own node's object but not gpu-b's,
// nor the observed annotation of a pod on gpu-b; a tenant with rights to
// its own pods cannot forge a plan (docs/security.md).
func TestClusterTrust(t *testing.T) {
	e := startEnv(t)
	e.install()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	l, err := e.c.Kube.CoreV1().Pods(nodeNS).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=topology-exporter", FieldSelector: "spec.nodeName=gpu-a"})
	if err != nil || len(l.Items) != 1 {
		t.Fatalf("the exporter on gpu-a: %v", err)
	}
	exporterA := e.as(e.podToken(&l.Items[0]))

	apply := func(node string) error {
		body := []byte(`{"apiVersion":"topology.node.k8s.io/v1alpha2","kind":"NodeResourceTopology","metadata":{"name":"` + node + `"},"attributes":[{"name":"nicaffinity.io/trust-test","value":"x"}]}`)
		return exporterA.CoreV1().RESTClient().Patch(types.ApplyPatchType).AbsPath("/apis/topology.node.k8s.io/v1alpha2/noderesourcetopologies", node).
			Param("fieldManager", "trust-test").Param("force", "true").Body(body).Do(ctx).Error()
	}
	if err := apply("gpu-b"); !refused(err) {
		t.Errorf("gpu-a's exporter applied gpu-b's object: %v", err)
	}
	// The same token on its own node is accepted: the refusal above is
	// the policy's, not a broken token. (A dry run changes nothing.)
	body := []byte(`{"apiVersion":"topology.node.k8s.io/v1alpha2","kind":"NodeResourceTopology","metadata":{"name":"gpu-a"}}`)
	if err := exporterA.CoreV1().RESTClient().Patch(types.ApplyPatchType).AbsPath("/apis/topology.node.k8s.io/v1alpha2/noderesourcetopologies", "gpu-a").
		Param("fieldManager", "trust-test").Param("dryRun", "All").Body(body).Do(ctx).Error(); err != nil {
		t.Errorf("gpu-a's exporter cannot apply its own object: %v", err)
	}

	// A pod on gpu-b: gpu-a's exporter may not write its observation.
	victim := workload{name: "victim", gpus: 1, vfs: 1} // VFs: only gpu-b
	e.create(victim)
	if p := e.waitRunning(victim.name); p.Spec.NodeName != "gpu-b" {
		t.Fatalf("%s ran on %s", victim.name, p.Spec.NodeName)
	}
	patch := []byte(`{"metadata":{"annotations":{"` + annotations.ObservedKey + `":"{\"gpus\":[],\"aligned\":true}"}}}`)
	if _, err := exporterA.CoreV1().Pods(ns).Patch(ctx, victim.name, types.MergePatchType, patch, metav1.PatchOptions{}); !refused(err) {
		t.Errorf("gpu-a's exporter wrote observed on a pod of gpu-b: %v", err)
	}

	// A tenant with full rights over pods in its namespace.
	tenantNS := "team-a"
	if _, err := e.c.Kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: tenantNS}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.c.Kube.CoreV1().ServiceAccounts(tenantNS).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "dev"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.c.Kube.RbacV1().RoleBindings(tenantNS).Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "dev-edit"},
		RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "edit"},
		Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Name: "dev", Namespace: tenantNS}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	exp := int64(600)
	tr, err := e.c.Kube.CoreV1().ServiceAccounts(tenantNS).CreateToken(ctx, "dev", &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &exp}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	tenant := e.as(tr.Status.Token)
	forged := workload{name: "forged", gpus: 1, rdma: true}.pod()
	forged.Namespace = tenantNS
	forged.Annotations = map[string]string{annotations.AllocationKey: `{"node":"gpu-a","gpus":["0000:35:00.0"],"nics":["mlx5_0"],"nrtGeneration":1}`}
	if _, err := tenant.CoreV1().Pods(tenantNS).Create(ctx, forged, metav1.CreateOptions{}); !refused(err) {
		t.Errorf("a tenant created a pod with a plan: %v", err)
	}
	forged.Annotations = nil
	if _, err := tenant.CoreV1().Pods(tenantNS).Create(ctx, forged, metav1.CreateOptions{}); err != nil {
		t.Errorf("the tenant cannot create a plain pod: %v (the refusal above proves nothing)", err)
	}
}
