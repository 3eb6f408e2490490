package podgroupapi

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	fakediscovery "k8s.io/client-go/discovery/fake"
	kubetesting "k8s.io/client-go/testing"
)

func TestServed(t *testing.T) {
	for _, c := range []struct {
		name      string
		resources []*metav1.APIResourceList
		want      bool
	}{
		{"standard 1.37 apiserver", []*metav1.APIResourceList{{GroupVersion: "scheduling.k8s.io/v1", APIResources: []metav1.APIResource{{Name: "priorityclasses"}}}}, false},
		{"group version without podgroups", []*metav1.APIResourceList{{GroupVersion: GroupVersion, APIResources: []metav1.APIResource{{Name: "workloads"}}}}, false},
		{"served", []*metav1.APIResourceList{{GroupVersion: GroupVersion, APIResources: []metav1.APIResource{{Name: "workloads"}, {Name: "podgroups"}}}}, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			d := &fakediscovery.FakeDiscovery{Fake: &kubetesting.Fake{Resources: c.resources}}
			got, err := Served(d)
			if err != nil || got != c.want {
				t.Errorf("Served = %v, %v; want %v", got, err, c.want)
			}
		})
	}
}
