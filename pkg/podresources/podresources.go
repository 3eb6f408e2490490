// Package podresources reads what the kubelet handed out to pods, over its
// podresources gRPC API (k8s.io/kubelet/pkg/apis/podresources/v1) on a unix
// socket, into a devices.Snapshot (pkg/devices) the exporter works from.
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

	"github.com/nicaffinity/nicaffinity/pkg/devices"
)

// DefaultSocket is where the kubelet serves the API.
const DefaultSocket = "/var/lib/kubelet/pod-resources/kubelet.sock"

// Source reads snapshots; the exporter holds one.
type Source interface {
	Snapshot(ctx context.Context) (devices.Snapshot, error)
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
func (c *Client) Snapshot(ctx context.Context) (devices.Snapshot, error) {
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	list, err := c.lister.List(ctx, &podresourcesv1.ListPodResourcesRequest{})
	if err != nil {
		return devices.Snapshot{}, fmt.Errorf("podresources List: %w", err)
	}
	alloc, err := c.lister.GetAllocatableResources(ctx, &podresourcesv1.AllocatableResourcesRequest{})
	if err != nil {
		return devices.Snapshot{}, fmt.Errorf("podresources GetAllocatableResources: %w", err)
	}
	return FromResponses(list, alloc)
}

// FromResponses turns the kubelet's answers into a Snapshot. Devices of all
// containers of a pod are merged; a pod listed twice is merged too. Errors name
// the pod and container.
func FromResponses(list *podresourcesv1.ListPodResourcesResponse, alloc *podresourcesv1.AllocatableResourcesResponse) (devices.Snapshot, error) {
	var s devices.Snapshot
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
			s.Pods = append(s.Pods, devices.Pod{Namespace: p.GetNamespace(), Name: p.GetName()})
		}
		for _, c := range p.GetContainers() {
			if c == nil {
				continue
			}
			devs, err := containerDevices(c.GetDevices())
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
	devs, err := containerDevices(alloc.GetDevices())
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

func containerDevices(in []*podresourcesv1.ContainerDevices) ([]devices.Device, error) {
	var out []devices.Device
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
			out = append(out, devices.Device{Resource: d.GetResourceName(), ID: id, NUMANodes: numa})
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

func memory(in []*podresourcesv1.ContainerMemory) ([]devices.Memory, error) {
	var out []devices.Memory
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
		out = append(out, devices.Memory{Type: m.GetMemoryType(), Bytes: int64(m.GetSize()), NUMANodes: numa})
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
func dedupe(in []devices.Device) []devices.Device {
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
