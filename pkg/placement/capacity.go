package placement

import "github.com/nicaffinity/nicaffinity/pkg/nrt"

// Capacity is how many of the node's healthy GPUs would have a usable NIC
// at level index li or closer with every pod gone. Where res is not "", it
// counts only NICs that offer VFs of res at all (free or not): with one
// such NIC when one is set (a pod asking for one VF takes it from one NIC,
// and every GPU it gets must be near that one), else with all of them (an
// upper bound for pods asking for more). A pod asking for more GPUs than a
// node's Capacity can never be aligned there, whatever leaves it: no wait
// ends in alignment on that node.
func Capacity(c *nrt.Compiled, li int, res string, one bool) int {
	if res == "" {
		return (c.Healthy & c.AnyNear[li]).Count()
	}
	if one {
		most := 0
		for _, n := range NICCapacities(c, li, res) {
			most = max(most, n)
		}
		return most
	}
	var all nrt.GPUSet
	for n, nic := range c.NICs {
		if _, ok := nic.VFs[res]; ok {
			all |= c.Near[li][n]
		}
	}
	return (c.Healthy & all).Count()
}

// NICCapacities are, for each NIC that offers VFs of res (in NIC order),
// how many healthy GPUs are at level index li or closer to it: the largest
// pod asking for one VF that the NIC could serve aligned, with every pod
// gone.
func NICCapacities(c *nrt.Compiled, li int, res string) []int {
	var out []int
	for n, nic := range c.NICs {
		if _, ok := nic.VFs[res]; ok {
			out = append(out, (c.Healthy & c.Near[li][n]).Count())
		}
	}
	return out
}
