package nicaffinity

import (
	"github.com/nicaffinity/nicaffinity/pkg/nrt"
)

// A bounded pod waits for aligned GPUs only where waiting can bring them:
// when no node of the cluster has, even empty, as many GPUs with a NIC at
// the pod's level as the pod asks (a fleet whose machines have one NIC for
// eight GPUs, or a pod larger than any node's aligned set), it is placed
// as a preferred pod at once. The simulator measured the cost of waiting
// for nothing: 18-25% longer mean completion than the default scheduler on
// such a fleet (docs/simulate.md, Where it helps).
//
// alignedCapacity keeps, per level, how many nodes have each count of
// healthy GPUs with a NIC at that level or closer, so "does some node have
// at least g" costs at most maxCapacity steps, and an object's change
// costs two counter updates per level, whatever the cluster's size.
//
// It counts GPUs and levels only: a VF pod's NICs must also have VFs,
// which it does not count, so a VF pod may still wait for a node that
// could never serve it (it then relaxes when its wait ends).
type alignedCapacity struct {
	nodes [nrt.NumLevels][maxCapacity + 1]int
}

// maxCapacity is the most GPUs a node's object may hold (its zone cap).
const maxCapacity = 64

// capacityOf is a compiled object's aligned GPUs per level (nil: none).
func capacityOf(c *nrt.Compiled) (out [nrt.NumLevels]int) {
	if c == nil {
		return out
	}
	for li := range out {
		out[li] = min((c.Healthy & c.AnyNear[li]).Count(), maxCapacity)
	}
	return out
}

// replace moves a node from its old capacity to its new one; has says the
// node was counted before.
func (a *alignedCapacity) replace(old [nrt.NumLevels]int, had bool, now [nrt.NumLevels]int, has bool) {
	for li := range a.nodes {
		if had {
			a.nodes[li][old[li]]--
		}
		if has {
			a.nodes[li][now[li]]++
		}
	}
}

// anyHolds reports whether some node has at least gpus aligned GPUs at
// level index li.
func (a *alignedCapacity) anyHolds(li, gpus int) bool {
	if gpus > maxCapacity {
		return false
	}
	for k := gpus; k <= maxCapacity; k++ {
		if a.nodes[li][k] > 0 {
			return true
		}
	}
	return false
}

// alignable reports whether some node of the cluster could, empty, give
// gpus GPUs at level index li or closer.
func (c *Cache) alignable(li, gpus int) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.capacity.anyHolds(li, gpus)
}
