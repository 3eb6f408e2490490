package doctor

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/nicaffinity/nicaffinity/pkg/nrt"
)

// railNIC is what the rails check reads of one NIC zone with a rail.
type railNIC struct {
	node, nic, rail, linkLayer, rate string
}

// railsCheck holds the GPU nodes' published rails to the pattern a
// rail-optimized fabric has: every node on the same rail set, and each
// rail's NICs alike in link layer and rate (for rails by subnet, the
// subnet is the rail, so it agrees by construction). It names the nodes
// that break the pattern, the majority being the pattern.
func railsCheck(b *builder, s ClusterState) {
	const name = "rails"
	sets := map[string][]string{} // node -> its sorted rails
	var nics []railNIC
	for _, n := range s.Nodes {
		obj := s.NRTs[n.Name]
		if obj == nil {
			continue
		}
		rails := map[string]bool{}
		for _, z := range obj.Zones {
			if z.Type != nrt.ZoneNIC {
				continue
			}
			rail := nrt.AttrValue(z.Attributes, nrt.AttrRail)
			if rail == "" {
				continue
			}
			rails[rail] = true
			nics = append(nics, railNIC{node: n.Name, nic: strings.TrimPrefix(z.Name, nrt.PrefixNIC), rail: rail,
				linkLayer: nrt.AttrValue(z.Attributes, nrt.AttrLinkLayer), rate: nrt.AttrValue(z.Attributes, nrt.AttrRate)})
		}
		sets[n.Name] = slices.Sorted(maps.Keys(rails))
	}
	if len(nics) == 0 {
		b.info(name, "no node publishes rails (the exporter's --rails or --rail-source: docs/nrt-schema.md)")
		return
	}
	// The pattern is the rail set most nodes have (ties: the larger set).
	count := map[string]int{}
	for _, rails := range sets {
		count[strings.Join(rails, ",")]++
	}
	pattern := ""
	for _, k := range slices.Sorted(maps.Keys(count)) {
		if count[k] > count[pattern] || count[k] == count[pattern] && len(k) > len(pattern) {
			pattern = k
		}
	}
	var off []string
	for _, node := range slices.Sorted(maps.Keys(sets)) {
		if got := strings.Join(sets[node], ","); got != pattern {
			if got == "" {
				got = "none"
			}
			off = append(off, fmt.Sprintf("%s (%s)", node, got))
		}
	}
	var mixed []string
	byRail := map[string][]railNIC{}
	for _, n := range nics {
		byRail[n.rail] = append(byRail[n.rail], n)
	}
	for _, rail := range slices.Sorted(maps.Keys(byRail)) {
		if m := unlike(byRail[rail]); m != "" {
			mixed = append(mixed, "rail "+rail+": "+m)
		}
	}
	switch {
	case len(off) > 0:
		b.warn(name, fmt.Sprintf("%d of %d nodes are not on rails %s: %s", len(off), len(sets), pattern, listOf(off)),
			"check those nodes' exporter --rails map (their NIC names may differ) or their cabling; a job placed across them crosses the spine")
	case len(mixed) > 0:
		b.warn(name, strings.Join(mixed, "; "), "a rail's NICs should be alike: check the named nodes' NICs, firmware and links")
	default:
		b.pass(name, fmt.Sprintf("%d nodes on rails %s, each rail alike in link layer and rate", len(sets), pattern))
	}
}

// unlike says how a rail's NICs differ in link layer or rate, naming the
// nodes off the majority; "" when they agree.
func unlike(nics []railNIC) string {
	var out []string
	for _, f := range []struct {
		what string
		of   func(railNIC) string
	}{{"link layer", func(n railNIC) string { return n.linkLayer }}, {"rate", func(n railNIC) string { return n.rate }}} {
		votes := map[string]int{}
		for _, n := range nics {
			votes[f.of(n)]++
		}
		if len(votes) < 2 {
			continue
		}
		major := ""
		for _, v := range slices.Sorted(maps.Keys(votes)) {
			if votes[v] > votes[major] {
				major = v
			}
		}
		var odd []string
		for _, n := range nics {
			if f.of(n) != major {
				odd = append(odd, fmt.Sprintf("%s %s %q", n.node, n.nic, f.of(n)))
			}
		}
		out = append(out, fmt.Sprintf("%s %q but %s", f.what, major, listOf(odd)))
	}
	return strings.Join(out, ", ")
}

// listOf shortens a long list of names to its first five and a count.
func listOf(items []string) string {
	if len(items) > 5 {
		return strings.Join(items[:5], ", ") + fmt.Sprintf(" and %d more", len(items)-5)
	}
	return strings.Join(items, ", ")
}
