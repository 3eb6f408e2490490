package podresources

import (
	"github.com/nicaffinity/nicaffinity/pkg/devices"

	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/proto"
	podresourcesv1 "k8s.io/kubelet/pkg/apis/podresources/v1"
)

func devs(res string, numa []int64, ids ...string) *podresourcesv1.ContainerDevices {
	d := &podresourcesv1.ContainerDevices{ResourceName: res, DeviceIds: ids}
	if numa != nil {
		d.Topology = &podresourcesv1.TopologyInfo{}
		for _, n := range numa {
			d.Topology.Nodes = append(d.Topology.Nodes, &podresourcesv1.NUMANode{ID: n})
		}
	}
	return d
}

func mem(typ string, size uint64, numa ...int64) *podresourcesv1.ContainerMemory {
	m := &podresourcesv1.ContainerMemory{MemoryType: typ, Size: size, Topology: &podresourcesv1.TopologyInfo{}}
	for _, n := range numa {
		m.Topology.Nodes = append(m.Topology.Nodes, &podresourcesv1.NUMANode{ID: n})
	}
	return m
}

func TestFromResponses(t *testing.T) {
	list := &podresourcesv1.ListPodResourcesResponse{PodResources: []*podresourcesv1.PodResources{
		{Name: "b", Namespace: "ns", Containers: []*podresourcesv1.ContainerResources{
			{Name: "c1", Devices: []*podresourcesv1.ContainerDevices{devs("nvidia.com/gpu", []int64{1}, "GPU-2", "GPU-1")}},
			{Name: "c2", Devices: []*podresourcesv1.ContainerDevices{devs("rdma/hca", nil, "hca"), devs("nvidia.com/gpu", nil, "GPU-1")},
				CpuIds: []int64{5, 4}, Memory: []*podresourcesv1.ContainerMemory{mem("memory", 1<<30, 1), mem("hugepages-2Mi", 0, 1)}},
		}},
		{Name: "a", Namespace: "ns"},
		{Name: "b", Namespace: "ns", Containers: []*podresourcesv1.ContainerResources{{Name: "init", Devices: []*podresourcesv1.ContainerDevices{devs("openshift.io/sriov_highnet", nil, "0000:04:00.2")}}}},
	}}
	alloc := &podresourcesv1.AllocatableResourcesResponse{Devices: []*podresourcesv1.ContainerDevices{devs("nvidia.com/gpu", []int64{0}, "GPU-1", "GPU-2"), nil},
		CpuIds: []int64{7, 4, 5, 6}, Memory: []*podresourcesv1.ContainerMemory{mem("memory", 4<<30, 0, 1), nil}}
	got, err := FromResponses(list, alloc)
	if err != nil {
		t.Fatal(err)
	}
	want := devices.Snapshot{
		Pods: []devices.Pod{
			{Namespace: "ns", Name: "a"},
			{Namespace: "ns", Name: "b", Devices: []devices.Device{
				{Resource: "nvidia.com/gpu", ID: "GPU-1", NUMANodes: []int{1}},
				{Resource: "nvidia.com/gpu", ID: "GPU-2", NUMANodes: []int{1}},
				{Resource: "openshift.io/sriov_highnet", ID: "0000:04:00.2"},
				{Resource: "rdma/hca", ID: "hca"},
			}, CPUs: []int{4, 5}, Memory: []devices.Memory{{Type: "memory", Bytes: 1 << 30, NUMANodes: []int{1}}}},
		},
		Allocatable:       []devices.Device{{Resource: "nvidia.com/gpu", ID: "GPU-1", NUMANodes: []int{0}}, {Resource: "nvidia.com/gpu", ID: "GPU-2", NUMANodes: []int{0}}},
		AllocatableCPUs:   []int{4, 5, 6, 7},
		AllocatableMemory: []devices.Memory{{Type: "memory", Bytes: 4 << 30, NUMANodes: []int{0, 1}}},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("(-want,+got):\n%s", diff)
	}
}

func TestFromResponsesBadInput(t *testing.T) {
	ok := &podresourcesv1.AllocatableResourcesResponse{}
	tests := []struct {
		name    string
		list    *podresourcesv1.ListPodResourcesResponse
		alloc   *podresourcesv1.AllocatableResourcesResponse
		wantErr string
	}{
		{"nil list", nil, ok, "empty response"},
		{"nil entry", &podresourcesv1.ListPodResourcesResponse{PodResources: []*podresourcesv1.PodResources{nil}}, ok, "entry 0 is empty"},
		{"no name", &podresourcesv1.ListPodResourcesResponse{PodResources: []*podresourcesv1.PodResources{{Namespace: "ns"}}}, ok, `entry 0 has no pod name or namespace ("ns"/"")`},
		{"no resource name", &podresourcesv1.ListPodResourcesResponse{PodResources: []*podresourcesv1.PodResources{{Name: "p", Namespace: "ns", Containers: []*podresourcesv1.ContainerResources{{Name: "c", Devices: []*podresourcesv1.ContainerDevices{devs("", nil, "x")}}}}}}, ok, `pod ns/p container "c": devices [x] have no resource name`},
		{"negative CPU ID", &podresourcesv1.ListPodResourcesResponse{}, &podresourcesv1.AllocatableResourcesResponse{CpuIds: []int64{-1}}, "GetAllocatableResources: CPU ID -1: not in [0, 65536)"},
		{"huge CPU ID", &podresourcesv1.ListPodResourcesResponse{PodResources: []*podresourcesv1.PodResources{{Name: "p", Namespace: "ns", Containers: []*podresourcesv1.ContainerResources{{Name: "c", CpuIds: []int64{1 << 40}}}}}}, ok, `pod ns/p container "c": CPU ID 1099511627776: not in [0, 65536)`},
		{"device on a NUMA node past the kernel's bound", &podresourcesv1.ListPodResourcesResponse{}, &podresourcesv1.AllocatableResourcesResponse{Devices: []*podresourcesv1.ContainerDevices{devs("nvidia.com/gpu", []int64{1 << 20}, "GPU-1")}}, "resource nvidia.com/gpu: NUMA node 1048576: not in [0, 1024)"},
		{"memory block without type", &podresourcesv1.ListPodResourcesResponse{}, &podresourcesv1.AllocatableResourcesResponse{Memory: []*podresourcesv1.ContainerMemory{mem("", 1, 0)}}, "a memory block of 1 bytes has no type"},
		{"memory block too large", &podresourcesv1.ListPodResourcesResponse{}, &podresourcesv1.AllocatableResourcesResponse{Memory: []*podresourcesv1.ContainerMemory{mem("memory", 1<<63, 0)}}, "memory block of 9223372036854775808 bytes: too large"},
		{"memory block on a negative NUMA node", &podresourcesv1.ListPodResourcesResponse{}, &podresourcesv1.AllocatableResourcesResponse{Memory: []*podresourcesv1.ContainerMemory{mem("memory", 1, -2)}}, "memory block: NUMA node -2: not in [0, 1024)"},
		{"empty device ID", &podresourcesv1.ListPodResourcesResponse{}, &podresourcesv1.AllocatableResourcesResponse{Devices: []*podresourcesv1.ContainerDevices{devs("nvidia.com/gpu", nil, "")}}, "GetAllocatableResources: resource nvidia.com/gpu has an empty device ID"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := FromResponses(tc.list, tc.alloc)
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("error = %v, want %q", err, tc.wantErr)
			}
		})
	}
}

// FuzzFromResponses feeds arbitrary protobuf bytes as the kubelet's answers.
func FuzzFromResponses(f *testing.F) {
	list, _ := proto.Marshal(&podresourcesv1.ListPodResourcesResponse{PodResources: []*podresourcesv1.PodResources{{Name: "p", Namespace: "ns",
		Containers: []*podresourcesv1.ContainerResources{{Name: "c", Devices: []*podresourcesv1.ContainerDevices{devs("nvidia.com/gpu", []int64{0}, "GPU-1")}}}}}})
	alloc, _ := proto.Marshal(&podresourcesv1.AllocatableResourcesResponse{Devices: []*podresourcesv1.ContainerDevices{devs("nvidia.com/gpu", []int64{0}, "GPU-1")}})
	f.Add(list, alloc)
	f.Fuzz(func(t *testing.T, listBytes, allocBytes []byte) {
		var l podresourcesv1.ListPodResourcesResponse
		var a podresourcesv1.AllocatableResourcesResponse
		if proto.Unmarshal(listBytes, &l) != nil || proto.Unmarshal(allocBytes, &a) != nil {
			return
		}
		s, err := FromResponses(&l, &a)
		if err != nil {
			return
		}
		for _, p := range s.Pods {
			if p.Name == "" || p.Namespace == "" {
				t.Fatalf("accepted a pod without a name: %+v", p)
			}
			for _, d := range p.Devices {
				if d.Resource == "" || d.ID == "" {
					t.Fatalf("accepted an unnamed device: %+v", d)
				}
			}
		}
	})
}
