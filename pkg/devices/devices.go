// Package devices holds what the kubelet says each pod of a node holds
// (devices, exclusive CPUs, memory blocks) and what it may hand out: the
// snapshot the exporter builds its object from and that the schema, the
// simulator and the tools share. It has no I/O: pkg/podresources reads
// snapshots over the kubelet's gRPC API, so that the scheduler plugin,
// which links pkg/nrt, does not link gRPC (TestPluginLinksNoGRPC).
package devices

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
