package placement

import "github.com/nicaffinity/nicaffinity/pkg/nrt"

// Node is what a node offers a pod: its compiled object and what is free.
// The scheduler's view subtracts what it reserved that the object does not
// show yet; kubectl and doctor take the object as it is (NodeOf). A Node is
// read, never written, by the functions of this package.
type Node struct {
	// C is the compiled object (nil: the node's object cannot be used,
	// and nothing here is asked).
	C *nrt.Compiled
	// Free are the free GPUs.
	Free nrt.GPUSet
	// VFFree[resource][n] are NIC n's free VFs.
	VFFree map[string][]int64
}

// NodeOf is a node as its object shows it: the object's free GPUs and VFs.
func NodeOf(c *nrt.Compiled) Node {
	return Node{C: c, Free: c.Free, VFFree: VFBase(c)}
}

// VFBase are the free VFs the object shows, by resource and NIC.
func VFBase(comp *nrt.Compiled) map[string][]int64 {
	out := map[string][]int64{}
	for n, nic := range comp.NICs {
		for res, free := range nic.VFs {
			if out[res] == nil {
				out[res] = make([]int64, len(comp.NICs))
			}
			out[res][n] = free
		}
	}
	return out
}
