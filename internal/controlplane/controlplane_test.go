package controlplane

import (
	"context"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestStart(t *testing.T) {
	cp := Start(t)
	list, err := cp.NRT.TopologyV1alpha2().NodeResourceTopologies().List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatalf("the NRT CRD is not served: %v", err)
	}
	if len(list.Items) != 0 {
		t.Errorf("fresh cluster has %d NRT objects", len(list.Items))
	}
	if _, err := cp.Kube.CoreV1().Namespaces().Get(context.Background(), "default", metav1.GetOptions{}); err != nil {
		t.Errorf("default namespace: %v", err)
	}
}
