package nicaffinity

import (
	"maps"
	"slices"

	"k8s.io/apimachinery/pkg/util/sets"

	"github.com/nicaffinity/nicaffinity/pkg/nrt"
)

// Candidate nodes for VF pods.
//
// PreFilter narrows a VF pod's candidates to the nodes whose object lists
// VFs of a resource the pod asks for (PreFilterResult), so the framework
// runs no filter on the rest: in a fleet where a few nodes carry SR-IOV
// VFs, every other node would otherwise be filtered, by NodeResourcesFit
// first, only to be turned away.
//
// Invariants:
//   - vfNodes[res] holds a node exactly while its published view is usable
//     (it has a compiled object) and that object lists VFs of res on some
//     NIC, with any count. Filter rejects every other node for a required
//     pod that asks for VFs of res under missingTopology: Reject (a view
//     without the resource has no free VF of it; a node without a usable
//     view is rejected whatever it asks), so the set holds every node
//     Filter could pass.
//   - The map and its sets are replaced whole, never written once
//     published: PreFilter hands a set to the framework, which copies it
//     (PreFilterResult.Merge) and never writes it.
//   - rebuild keeps it, comparing one pointer a call (the compiled object
//     the node is indexed under), so Reserve and Unreserve, which publish
//     views of the same object, cost no more than that.

// vfNodeIndex is the published index: per VF resource, the nodes offering it.
type vfNodeIndex struct {
	sets map[string]sets.Set[string]
}

// vfNodes is the set of nodes offering VFs of res (nil: none). Callers
// must not write it.
func (c *Cache) vfNodes(res string) sets.Set[string] {
	return c.vfIndex.Load().sets[res]
}

// indexVFs moves node in the VF index to what its new view v offers. The
// caller holds mu.
func (c *Cache) indexVFs(node string, e *nodeEntry, v *nodeView) {
	var want *nodeEntryVFs
	if v != nil && v.C != nil && len(e.vfBase) > 0 {
		if e.vfIndexed != nil && e.vfIndexed.compiled == v.C {
			return
		}
		want = &nodeEntryVFs{compiled: v.C, res: slices.Sorted(maps.Keys(e.vfBase))}
	}
	if want == nil && e.vfIndexed == nil {
		return
	}
	had, have := e.vfIndexed.resources(), want.resources()
	e.vfIndexed = want
	if slices.Equal(had, have) {
		return
	}
	old := c.vfIndex.Load()
	next := &vfNodeIndex{sets: maps.Clone(old.sets)}
	if next.sets == nil {
		next.sets = map[string]sets.Set[string]{}
	}
	for _, res := range had {
		if slices.Contains(have, res) {
			continue
		}
		s := next.sets[res].Clone()
		s.Delete(node)
		next.sets[res] = s
		if s.Len() == 0 {
			delete(next.sets, res)
		}
	}
	for _, res := range have {
		if slices.Contains(had, res) {
			continue
		}
		s := next.sets[res].Clone() // a nil set clones to an empty one
		s.Insert(node)
		next.sets[res] = s
	}
	c.vfIndex.Store(next)
}

// nodeEntryVFs is what a node is indexed under: the compiled object and
// the VF resources it lists, sorted.
type nodeEntryVFs struct {
	compiled *nrt.Compiled
	res      []string
}

// resources are the VF resources indexed (none for nil).
func (x *nodeEntryVFs) resources() []string {
	if x == nil {
		return nil
	}
	return x.res
}
