package nicaffinity

import (
	"slices"

	"github.com/nicaffinity/nicaffinity/pkg/nrt"
)

// Rails come from the nodes' objects, which each node's exporter writes
// about itself (docs/security.md). A node's word may decide where pods go
// on that node; what steers a job's pods on other nodes must not rest on
// one node's word alone. So:
//
//   - a rail name counts only once railQuorum nodes publish it: a node
//     cannot invent rails that a job's pods elsewhere are then held to
//     (a job records only counted rails), nor rails railRoom weighs;
//   - in railRoom a node weighs at most one pod's worth of GPUs per rail,
//     as much as an honest node with room for the pod: claiming more free
//     GPUs than that moves nothing.
//
// railNodes counts, per rail name, the nodes whose object names it (each
// node's names are kept on its entry, replaced whole by each object).
// Its size is bounded by the objects' caps: at most 64 NICs a node.
const railQuorum = 2

// nodeRails are the distinct rail names of a compiled object, sorted.
func nodeRails(c *nrt.Compiled) []string {
	if c == nil {
		return nil
	}
	var out []string
	for _, nic := range c.NICs {
		if nic.Rail != "" {
			out = append(out, nic.Rail)
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// setRails replaces a node's rail names in the count; the caller holds mu.
func (c *Cache) setRails(e *nodeEntry, rails []string) {
	for _, r := range e.rails {
		if c.railNodes[r]--; c.railNodes[r] <= 0 {
			delete(c.railNodes, r)
		}
	}
	e.rails = rails
	for _, r := range rails {
		c.railNodes[r]++
	}
}

// countedRails are the rails of rails that enough nodes publish, in order.
func (c *Cache) countedRails(rails []string) []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []string
	for _, r := range rails {
		if c.railNodes[r] >= railQuorum {
			out = append(out, r)
		}
	}
	return out
}

// railsCounted is the set of rail names enough nodes publish.
func (c *Cache) railsCounted() map[string]bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make(map[string]bool, len(c.railNodes))
	for r, n := range c.railNodes {
		if n >= railQuorum {
			out[r] = true
		}
	}
	return out
}
