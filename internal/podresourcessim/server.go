// Package podresourcessim serves the kubelet podresources gRPC API on a unix
// socket from allocations the simulated kubelet (or a test) controls: a
// stand-in of the kubelet's server, simulation code.
package podresourcessim

import (
	"context"
	"fmt"
	"net"
	"os"
	"sort"
	"sync"

	"google.golang.org/grpc"
	podresourcesv1 "k8s.io/kubelet/pkg/apis/podresources/v1"

	"github.com/nicaffinity/nicaffinity/pkg/devices"
)

// Server is a podresources server.
type Server struct {
	podresourcesv1.UnimplementedPodResourcesListerServer

	Socket string

	mu          sync.Mutex
	pods        map[string]devices.Pod
	allocatable []devices.Device
	cpus        []int
	memory      []devices.Memory
	srv         *grpc.Server
	calls       int
}

// New returns a stopped server for socket.
func New(socket string) *Server {
	return &Server{Socket: socket, pods: map[string]devices.Pod{}}
}

// Start listens on the socket (removing a stale one, as the kubelet does).
func (s *Server) Start() error {
	_ = os.Remove(s.Socket)
	l, err := net.Listen("unix", s.Socket)
	if err != nil {
		return fmt.Errorf("podresources test server: %w", err)
	}
	srv := grpc.NewServer()
	podresourcesv1.RegisterPodResourcesListerServer(srv, s)
	s.mu.Lock()
	s.srv = srv
	s.mu.Unlock()
	go func() { _ = srv.Serve(l) }()
	return nil
}

// Stop stops serving and removes the socket (a kubelet going away).
func (s *Server) Stop() {
	s.mu.Lock()
	srv := s.srv
	s.srv = nil
	s.mu.Unlock()
	if srv != nil {
		srv.Stop()
	}
	_ = os.Remove(s.Socket)
}

// SetAllocatable replaces what the node offers.
func (s *Server) SetAllocatable(devs []devices.Device) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.allocatable = append([]devices.Device(nil), devs...)
}

// SetAllocatableCPUsMemory replaces the CPUs and memory the node offers (as
// the kubelet does with its CPU and memory managers' static policies).
func (s *Server) SetAllocatableCPUsMemory(cpus []int, mem []devices.Memory) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.cpus, s.memory = append([]int(nil), cpus...), append([]devices.Memory(nil), mem...)
}

// SetPodResources sets everything one pod holds: devices, exclusive CPUs, memory.
func (s *Server) SetPodResources(p devices.Pod) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.pods[p.Namespace+"/"+p.Name] = p
}

// SetPod sets the devices one pod holds (nil devices: a pod without devices).
func (s *Server) SetPod(namespace, name string, devs []devices.Device) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.pods[namespace+"/"+name] = devices.Pod{Namespace: namespace, Name: name, Devices: append([]devices.Device(nil), devs...)}
}

// DeletePod forgets a pod.
func (s *Server) DeletePod(namespace, name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.pods, namespace+"/"+name)
}

// Calls counts List calls served.
func (s *Server) Calls() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.calls
}

func toContainerDevices(devs []devices.Device) []*podresourcesv1.ContainerDevices {
	var out []*podresourcesv1.ContainerDevices
	for _, d := range devs {
		cd := &podresourcesv1.ContainerDevices{ResourceName: d.Resource, DeviceIds: []string{d.ID}}
		if len(d.NUMANodes) > 0 {
			cd.Topology = &podresourcesv1.TopologyInfo{}
			for _, n := range d.NUMANodes {
				cd.Topology.Nodes = append(cd.Topology.Nodes, &podresourcesv1.NUMANode{ID: int64(n)})
			}
		}
		out = append(out, cd)
	}
	return out
}

// List implements the API: one container per pod holding all its devices.
func (s *Server) List(context.Context, *podresourcesv1.ListPodResourcesRequest) (*podresourcesv1.ListPodResourcesResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls++
	keys := make([]string, 0, len(s.pods))
	for k := range s.pods {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	resp := &podresourcesv1.ListPodResourcesResponse{}
	for _, k := range keys {
		p := s.pods[k]
		resp.PodResources = append(resp.PodResources, &podresourcesv1.PodResources{
			Name: p.Name, Namespace: p.Namespace,
			Containers: []*podresourcesv1.ContainerResources{{Name: "main", Devices: toContainerDevices(p.Devices), CpuIds: toCPUIDs(p.CPUs), Memory: toMemory(p.Memory)}},
		})
	}
	return resp, nil
}

// GetAllocatableResources implements the API.
func (s *Server) GetAllocatableResources(context.Context, *podresourcesv1.AllocatableResourcesRequest) (*podresourcesv1.AllocatableResourcesResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return &podresourcesv1.AllocatableResourcesResponse{Devices: toContainerDevices(s.allocatable), CpuIds: toCPUIDs(s.cpus), Memory: toMemory(s.memory)}, nil
}

func toCPUIDs(cpus []int) []int64 {
	var out []int64
	for _, c := range cpus {
		out = append(out, int64(c))
	}
	return out
}

func toMemory(mem []devices.Memory) []*podresourcesv1.ContainerMemory {
	var out []*podresourcesv1.ContainerMemory
	for _, m := range mem {
		cm := &podresourcesv1.ContainerMemory{MemoryType: m.Type, Size: uint64(m.Bytes), Topology: &podresourcesv1.TopologyInfo{}}
		for _, n := range m.NUMANodes {
			cm.Topology.Nodes = append(cm.Topology.Nodes, &podresourcesv1.NUMANode{ID: int64(n)})
		}
		out = append(out, cm)
	}
	return out
}
