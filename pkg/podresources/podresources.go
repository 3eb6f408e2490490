// Package podresources reads what the kubelet handed out to pods, over its
// podresources gRPC API (k8s.io/kubelet/pkg/apis/podresources/v1) on a unix
// socket, into a Snapshot the exporter works from.
package podresources

import (
	"context"
	"fmt"
	"math"
	"slices"
	"sort"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	podresourcesv1 "k8s.io/kubelet/pkg/apis/podresources/v1"
)

// DefaultSocket is where the kubelet serves the API.
const DefaultSocket = "/var/lib/kubelet/pod-resources/kubelet.sock"

// Device is one device of a device-plugin resource.
type Device struct {
	Resource string `json:"resource"`
	// ID as the device plugin names it: a GPU UUID for the NVIDIA plugin, a
	// VF PCI address for the SR-IOV plugin.
	ID string `json:"id"`
	// NUMANodes the kubelet reports for the device (may be empty).
	NUMANodes []int `json:"numaNodes,omitempty"`
}

// Memory is a block of memory or huge pages on NUMA nodes, as the kubelet's
// memory manager reports it (static policy only; none reports nothing).
type Memory struct {
	// Type is the resource: "memory" or "hugepages-<size>".
	Type      string `json:"type"`
	Bytes     int64  `json:"bytes"`
	NUMANodes []int  `json:"numaNodes,omitempty"`
}

// Pod is one pod and every device its containers hold.
type Pod struct {
	Namespace string   `json:"namespace"`
	Name      string   `json:"name"`
	Devices   []Device `json:"devices,omitempty"`
	// CPUs are the exclusive CPUs of its containers (CPU manager static
	// policy; shared-pool CPUs are not reported), sorted, without repeats.
	CPUs []int `json:"cpus,omitempty"`
	// Memory are its containers' memory blocks (memory manager static policy).
	Memory []Memory `json:"memory,omitempty"`
}

// Snapshot is one reading of the node.
type Snapshot struct {
	// Pods are every pod the kubelet knows, with or without devices.
	Pods []Pod `json:"pods"`
	// Allocatable are the devices the kubelet may hand out (healthy ones).
	Allocatable []Device `json:"allocatable"`
	// AllocatableCPUs are the CPUs the CPU manager may hand out exclusively
	// (empty under its none policy), sorted.
	AllocatableCPUs []int `json:"allocatableCPUs,omitempty"`
	// AllocatableMemory is what the memory manager may hand out (empty
	// unless its policy is static).
	AllocatableMemory []Memory `json:"allocatableMemory,omitempty"`
}

// Source reads snapshots; the exporter holds one.
type Source interface {
	Snapshot(ctx context.Context) (Snapshot, error)
}

// Client talks to the kubelet.
type Client struct {
	conn    *grpc.ClientConn
	lister  podresourcesv1.PodResourcesListerClient
	timeout time.Duration
}

// Dial prepares a client for the socket; the connection is made on first use
// and remade after the kubelet restarts.
func Dial(socket string, timeout time.Duration) (*Client, error) {
	conn, err := grpc.NewClient("unix://"+socket,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(16*1024*1024)))
	if err != nil {
		return nil, fmt.Errorf("podresources socket %s: %w", socket, err)
	}
	return &Client{conn: conn, lister: podresourcesv1.NewPodResourcesListerClient(conn), timeout: timeout}, nil
}

// Close closes the connection.
func (c *Client) Close() error { return c.conn.Close() }

// Snapshot calls List and GetAllocatableResources.
func (c *Client) Snapshot(ctx context.Context) (Snapshot, error) {
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	list, err := c.lister.List(ctx, &podresourcesv1.ListPodResourcesRequest{})
	if err != nil {
		return Snapshot{}, fmt.Errorf("podresources List: %w", err)
	}
	alloc, err := c.lister.GetAllocatableResources(ctx, &podresourcesv1.AllocatableResourcesRequest{})
	if err != nil {
		return Snapshot{}, fmt.Errorf("podresources GetAllocatableResources: %w", err)
	}
	return FromResponses(list, alloc)
}

// FromResponses turns the kubelet's answers into a Snapshot. Devices of all
// containers of a pod are merged; a pod listed twice is merged too. Errors name
// the pod and container.
func FromResponses(list *podresourcesv1.ListPodResourcesResponse, alloc *podresourcesv1.AllocatableResourcesResponse) (Snapshot, error) {
	var s Snapshot
	if list == nil || alloc == nil {
		return s, fmt.Errorf("podresources: empty response")
	}
	byKey := map[string]int{}
	for i, p := range list.GetPodResources() {
		if p == nil {
			return s, fmt.Errorf("podresources List: entry %d is empty", i)
		}
		if p.GetName() == "" || p.GetNamespace() == "" {
			return s, fmt.Errorf("podresources List: entry %d has no pod name or namespace (%q/%q)", i, p.GetNamespace(), p.GetName())
		}
		key := p.GetNamespace() + "/" + p.GetName()
		idx, seen := byKey[key]
		if !seen {
			idx = len(s.Pods)
			byKey[key] = idx
			s.Pods = append(s.Pods, Pod{Namespace: p.GetNamespace(), Name: p.GetName()})
		}
		for _, c := range p.GetContainers() {
			if c == nil {
				continue
			}
			devs, err := devices(c.GetDevices())
			if err != nil {
				return s, fmt.Errorf("podresources List: pod %s container %q: %w", key, c.GetName(), err)
			}
			s.Pods[idx].Devices = append(s.Pods[idx].Devices, devs...)
			cpus, err := cpuIDs(c.GetCpuIds())
			if err != nil {
				return s, fmt.Errorf("podresources List: pod %s container %q: %w", key, c.GetName(), err)
			}
			s.Pods[idx].CPUs = append(s.Pods[idx].CPUs, cpus...)
			mem, err := memory(c.GetMemory())
			if err != nil {
				return s, fmt.Errorf("podresources List: pod %s container %q: %w", key, c.GetName(), err)
			}
			s.Pods[idx].Memory = append(s.Pods[idx].Memory, mem...)
		}
		s.Pods[idx].Devices = dedupe(s.Pods[idx].Devices)
		s.Pods[idx].CPUs = dedupeInts(s.Pods[idx].CPUs)
	}
	devs, err := devices(alloc.GetDevices())
	if err != nil {
		return s, fmt.Errorf("podresources GetAllocatableResources: %w", err)
	}
	s.Allocatable = dedupe(devs)
	cpus, err := cpuIDs(alloc.GetCpuIds())
	if err != nil {
		return s, fmt.Errorf("podresources GetAllocatableResources: %w", err)
	}
	s.AllocatableCPUs = dedupeInts(cpus)
	if s.AllocatableMemory, err = memory(alloc.GetMemory()); err != nil {
		return s, fmt.Errorf("podresources GetAllocatableResources: %w", err)
	}
	sort.Slice(s.Pods, func(i, j int) bool {
		return s.Pods[i].Namespace+"/"+s.Pods[i].Name < s.Pods[j].Namespace+"/"+s.Pods[j].Name
	})
	return s, nil
}

func devices(in []*podresourcesv1.ContainerDevices) ([]Device, error) {
	var out []Device
	for _, d := range in {
		if d == nil {
			continue
		}
		if d.GetResourceName() == "" {
			return nil, fmt.Errorf("devices %v have no resource name", d.GetDeviceIds())
		}
		numa, err := numaNodes(d.GetTopology())
		if err != nil {
			return nil, fmt.Errorf("resource %s: %w", d.GetResourceName(), err)
		}
		for _, id := range d.GetDeviceIds() {
			if id == "" {
				return nil, fmt.Errorf("resource %s has an empty device ID", d.GetResourceName())
			}
			out = append(out, Device{Resource: d.GetResourceName(), ID: id, NUMANodes: numa})
		}
	}
	return out, nil
}

// MaxCPUID bounds a CPU ID: the kernel's NR_CPUS is at most 8192 on every
// distribution kernel.
const MaxCPUID = 1 << 16

func cpuIDs(in []int64) ([]int, error) {
	out := make([]int, 0, len(in))
	for _, id := range in {
		if id < 0 || id >= MaxCPUID {
			return nil, fmt.Errorf("CPU ID %d: not in [0, %d)", id, MaxCPUID)
		}
		out = append(out, int(id))
	}
	return out, nil
}

func memory(in []*podresourcesv1.ContainerMemory) ([]Memory, error) {
	var out []Memory
	for _, m := range in {
		if m == nil || m.GetSize() == 0 {
			continue
		}
		if m.GetMemoryType() == "" {
			return nil, fmt.Errorf("a memory block of %d bytes has no type", m.GetSize())
		}
		if m.GetSize() > math.MaxInt64 {
			return nil, fmt.Errorf("%s block of %d bytes: too large", m.GetMemoryType(), m.GetSize())
		}
		numa, err := numaNodes(m.GetTopology())
		if err != nil {
			return nil, fmt.Errorf("%s block: %w", m.GetMemoryType(), err)
		}
		out = append(out, Memory{Type: m.GetMemoryType(), Bytes: int64(m.GetSize()), NUMANodes: numa})
	}
	return out, nil
}

// MaxNUMAID bounds a NUMA node ID (the kernel's MAX_NUMNODES is 1024).
const MaxNUMAID = 1024

func numaNodes(t *podresourcesv1.TopologyInfo) ([]int, error) {
	var out []int
	for _, n := range t.GetNodes() {
		if n == nil {
			continue
		}
		if n.GetID() < 0 || n.GetID() >= MaxNUMAID {
			return nil, fmt.Errorf("NUMA node %d: not in [0, %d)", n.GetID(), MaxNUMAID)
		}
		out = append(out, int(n.GetID()))
	}
	return out, nil
}

func dedupeInts(in []int) []int {
	sort.Ints(in)
	return slices.Compact(in)
}

// dedupe sorts devices and drops repeats (a device shared by two containers).
func dedupe(in []Device) []Device {
	sort.SliceStable(in, func(i, j int) bool {
		if in[i].Resource != in[j].Resource {
			return in[i].Resource < in[j].Resource
		}
		return in[i].ID < in[j].ID
	})
	out := in[:0]
	for i, d := range in {
		if i > 0 && d.Resource == in[i-1].Resource && d.ID == in[i-1].ID {
			continue
		}
		out = append(out, d)
	}
	return out
}

// IDs returns the device IDs of one resource.
func IDs(devs []Device, resource string) []string {
	var out []string
	for _, d := range devs {
		if d.Resource == resource {
			out = append(out, d.ID)
		}
	}
	return out
}
