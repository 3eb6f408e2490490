package request

import (
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	resourcehelper "k8s.io/component-helpers/resource"
)

// fromPodRequests is what requests must equal: the library's sums of the
// resources Read looks at.
func fromPodRequests(p *v1.Pod, c Config) map[v1.ResourceName]int64 {
	out := map[v1.ResourceName]int64{}
	for name, q := range resourcehelper.PodRequests(p, resourcehelper.PodResourcesOptions{}) {
		n := string(name)
		if n == c.GPUResource || c.rdma(n) || slices.Contains(c.SRIOVResources, n) {
			out[name] = q.Value()
		}
	}
	return out
}

func fromRequests(p *v1.Pod, c Config) map[v1.ResourceName]int64 {
	out := map[v1.ResourceName]int64{}
	for _, r := range requests(p, c, nil) {
		if _, dup := out[r.name]; dup {
			return map[v1.ResourceName]int64{"duplicate " + r.name: 0}
		}
		out[r.name] = r.q.Value()
	}
	return out
}

// TestRequestsMatchPodRequests: requests sums what PodRequests sums, on
// the pods its own sum takes (containers only) and on those it hands to
// PodRequests (init containers, sidecars, overhead, pod-level resources).
func TestRequestsMatchPodRequests(t *testing.T) {
	always := v1.ContainerRestartPolicyAlways
	sidecar := container("nvidia.com/gpu", "1", "rdma/hca", "1")
	sidecar.RestartPolicy = &always
	cfg := Default([]string{sriov})
	withOverhead := pod(nil, nil, container("nvidia.com/gpu", "2"))
	withOverhead.Spec.Overhead = v1.ResourceList{"nvidia.com/gpu": resource.MustParse("1"), v1.ResourceCPU: resource.MustParse("100m")}
	podLevel := pod(nil, nil, container("nvidia.com/gpu", "2", "cpu", "1"))
	podLevel.Spec.Resources = &v1.ResourceRequirements{Requests: v1.ResourceList{v1.ResourceCPU: resource.MustParse("4"), "nvidia.com/gpu": resource.MustParse("8")}}
	for name, p := range map[string]*v1.Pod{
		"no requests":               pod(nil, nil, v1.Container{Name: "c"}),
		"no GPU":                    pod(nil, nil, container("cpu", "2", "memory", "1Gi")),
		"one container":             pod(nil, nil, container("nvidia.com/gpu", "1", "rdma/hca", "1", "cpu", "1")),
		"summed over containers":    pod(nil, nil, container("nvidia.com/gpu", "2", sriov, "1"), container("nvidia.com/gpu", "3", sriov, "2", "rdma/ib", "1")),
		"zero GPUs":                 pod(nil, nil, container("nvidia.com/gpu", "0", "rdma/hca", "1")),
		"init container max":        pod(nil, []v1.Container{container("nvidia.com/gpu", "8")}, container("nvidia.com/gpu", "2")),
		"sidecar added":             pod(nil, []v1.Container{sidecar}, container("nvidia.com/gpu", "2")),
		"sidecar then init":         pod(nil, []v1.Container{sidecar, container("nvidia.com/gpu", "4")}, container("nvidia.com/gpu", "1")),
		"overhead":                  withOverhead,
		"pod-level resources":       podLevel,
		"a resource named like one": pod(nil, nil, container("nvidia.com/gpus", "4", "rdma", "1", "nvidia.com/gpu", "1")),
	} {
		t.Run(name, func(t *testing.T) {
			if diff := cmp.Diff(fromPodRequests(p, cfg), fromRequests(p, cfg)); diff != "" {
				t.Errorf("requests differ from PodRequests (-want,+got):\n%s", diff)
			}
		})
	}
}

// FuzzRequests: for any containers' requests of the resources Read looks
// at and others, with or without an init container, requests and
// PodRequests agree.
func FuzzRequests(f *testing.F) {
	f.Add(int64(1), int64(1), int64(0), int64(2), "rdma/hca", false)
	f.Add(int64(3), int64(0), int64(4), int64(-1), "cpu", true)
	f.Add(int64(1<<40), int64(7), int64(1), int64(1<<62), sriov, false)
	cfg := Default([]string{sriov, "openshift.io/sriov_net"})
	f.Fuzz(func(t *testing.T, gpus1, gpus2, vfs, other int64, otherName string, init bool) {
		if len(otherName) > 253 || otherName == "" {
			return
		}
		c1, c2 := v1.Container{Name: "a"}, v1.Container{Name: "b"}
		c1.Resources.Requests = v1.ResourceList{"nvidia.com/gpu": *resource.NewQuantity(gpus1, resource.DecimalSI), v1.ResourceName(otherName): *resource.NewQuantity(other, resource.DecimalSI)}
		c2.Resources.Requests = v1.ResourceList{"nvidia.com/gpu": *resource.NewQuantity(gpus2, resource.DecimalSI), sriov: *resource.NewQuantity(vfs, resource.DecimalSI)}
		p := pod(nil, nil, c1, c2)
		if init {
			p.Spec.InitContainers = []v1.Container{c2}
		}
		if diff := cmp.Diff(fromPodRequests(p, cfg), fromRequests(p, cfg)); diff != "" {
			t.Fatalf("requests differ from PodRequests (-want,+got):\n%s", diff)
		}
	})
}
