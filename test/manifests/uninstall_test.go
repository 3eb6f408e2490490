package manifests

import (
	"context"
	"encoding/json"
	"slices"
	"testing"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"sigs.k8s.io/yaml"

	"github.com/nicaffinity/nicaffinity/internal/controlplane"
	"github.com/nicaffinity/nicaffinity/pkg/nrt/nrttest"
)

const crdName = "noderesourcetopologies.topology.node.k8s.io"

// TestUninstallKeepsCRD: the CRD comes from manifests/crds alone; applying
// manifests/ and deleting everything it renders (kubectl delete -k
// manifests/) leaves the CRD and another updater's objects in place.
func TestUninstallKeepsCRD(t *testing.T) {
	crds := kustomizeBuildDir(t, manifestsDir+"/crds")
	if len(crds) != 1 || kindName(t, crds[0]) != "CustomResourceDefinition/"+crdName {
		t.Fatalf("manifests/crds renders %d objects, want the one CRD", len(crds))
	}
	installed := kustomizeBuild(t)
	for _, doc := range installed {
		if k := kindName(t, doc); k == "CustomResourceDefinition/"+crdName {
			t.Fatalf("manifests/ renders the CRD: uninstalling would delete it with every updater's objects")
		}
	}

	cp := controlplane.Start(t) // installs the CRD as manifests/crds does
	ctx := context.Background()
	foreign := nrttest.HalfNICs("gpu-node-1", 0, 1)
	body, _ := json.Marshal(foreign)
	force := true
	if _, err := cp.NRT.TopologyV1alpha2().NodeResourceTopologies().Patch(ctx, foreign.Name, types.ApplyPatchType, body,
		metav1.PatchOptions{FieldManager: "nfd-topology-updater", Force: &force}); err != nil {
		t.Fatal(err)
	}
	dyn, mapper := dynamicClients(t, cp)
	resource := func(u *unstructured.Unstructured) dynamic.ResourceInterface {
		gvk := u.GroupVersionKind()
		m, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
		if err != nil {
			t.Fatalf("%s: %v", gvk, err)
		}
		if m.Scope.Name() == meta.RESTScopeNameNamespace {
			return dyn.Resource(m.Resource).Namespace(u.GetNamespace())
		}
		return dyn.Resource(m.Resource)
	}
	var objs []*unstructured.Unstructured
	for _, doc := range installed {
		u := &unstructured.Unstructured{}
		if err := yaml.Unmarshal(doc, &u.Object); err != nil {
			t.Fatal(err)
		}
		objs = append(objs, u)
	}
	// Namespaces first, as kubectl orders them.
	slices.SortStableFunc(objs, func(a, b *unstructured.Unstructured) int {
		return boolInt(b.GetKind() == "Namespace") - boolInt(a.GetKind() == "Namespace")
	})
	for _, u := range objs {
		b, _ := json.Marshal(u.Object)
		if _, err := resource(u).Patch(ctx, u.GetName(), types.ApplyPatchType, b, metav1.PatchOptions{FieldManager: "kubectl", Force: &force}); err != nil {
			t.Fatalf("applying %s %s: %v", u.GetKind(), u.GetName(), err)
		}
	}
	for i := len(objs) - 1; i >= 0; i-- {
		if err := resource(objs[i]).Delete(ctx, objs[i].GetName(), metav1.DeleteOptions{}); err != nil {
			t.Fatalf("deleting %s %s: %v", objs[i].GetKind(), objs[i].GetName(), err)
		}
	}
	if _, err := cp.NRT.TopologyV1alpha2().NodeResourceTopologies().Get(ctx, foreign.Name, metav1.GetOptions{}); err != nil {
		t.Errorf("another updater's object after uninstalling: %v", err)
	}
	crd := dyn.Resource(apiextensionsGVR)
	if _, err := crd.Get(ctx, crdName, metav1.GetOptions{}); err != nil {
		t.Errorf("the CRD after uninstalling: %v", err)
	}
}

func kindName(t *testing.T, doc []byte) string {
	t.Helper()
	u := &unstructured.Unstructured{}
	if err := yaml.Unmarshal(doc, &u.Object); err != nil {
		t.Fatal(err)
	}
	return u.GetKind() + "/" + u.GetName()
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

var apiextensionsGVR = apiextensionsv1.SchemeGroupVersion.WithResource("customresourcedefinitions")
