package nrt

import (
	"fmt"
	"net/netip"
	"regexp"
	"slices"
	"strings"

	"github.com/nicaffinity/nicaffinity/pkg/topology"
)

// Where a NIC's rail comes from (AttrRailSource). In a rail-optimized fabric
// NIC k of every node is cabled to leaf switch k, "rail k"; a job whose pods
// use different rails sends its traffic through the spine.
const (
	// RailFromMap: the operator's map from RDMA device to rail, per node
	// pool (the exporter's --rails).
	RailFromMap = "map"
	// RailFromSubnet: the IPv4 subnet of the NIC's netdev, on fabrics that
	// give each rail one subnet shared by every node. A /31 or /32 (L3
	// fabrics with a point-to-point subnet per NIC) names no rail.
	RailFromSubnet = "subnet"
	// RailFromPCIRank: the NIC's rank by PCI address among the node's RDMA
	// PFs, a convention that holds only where every node has the same NICs
	// in the same slots.
	RailFromPCIRank = "pci-rank"
)

// Rails configures where NIC zones' rails come from. The zero value
// publishes none: an unknown rail is no attribute, never a guess.
type Rails struct {
	// Source is "", RailFromMap, RailFromSubnet or RailFromPCIRank. The
	// map, when given, wins over the source for the NICs it names.
	Source string
	// Map gives rails by RDMA device name.
	Map map[string]string
	// Subnets are the IPv4 prefixes of the NICs' netdevs by RDMA device
	// name ("10.0.3.7/24"), read at the exporter's edge for RailFromSubnet.
	Subnets map[string]string
}

// MaxRails bounds the map: more entries than a node can have NICs.
const MaxRails = MaxNICs

var railRE = regexp.MustCompile(`^[A-Za-z0-9]([A-Za-z0-9._-]{0,61}[A-Za-z0-9])?$`)

// ParseRailMap reads "mlx5_0=0,mlx5_1=1" (the exporter's --rails): RDMA
// device names to rail names of at most 63 characters, letters, digits,
// '.', '_' and '-'. Errors name the entry.
func ParseRailMap(s string) (map[string]string, error) {
	out := map[string]string{}
	if strings.TrimSpace(s) == "" {
		return out, nil
	}
	entries := strings.Split(s, ",")
	if len(entries) > MaxRails {
		return nil, fmt.Errorf("rails: %d entries, at most %d", len(entries), MaxRails)
	}
	for _, e := range entries {
		nic, rail, ok := strings.Cut(strings.TrimSpace(e), "=")
		switch {
		case !ok || nic == "" || len(nic) > MaxNameLen:
			return nil, fmt.Errorf("rails entry %q: want <rdma device>=<rail>", truncate(e, 64))
		case !railRE.MatchString(rail):
			return nil, fmt.Errorf("rails entry %q: rail %q is not 1-63 letters, digits, '.', '_' or '-'", truncate(e, 64), truncate(rail, 64))
		}
		if _, dup := out[nic]; dup {
			return nil, fmt.Errorf("rails: %s given twice", nic)
		}
		out[nic] = rail
	}
	return out, nil
}

// Validate checks the configuration.
func (r Rails) Validate() error {
	switch r.Source {
	case "", RailFromMap, RailFromSubnet, RailFromPCIRank:
	default:
		return fmt.Errorf("rail source %q: want %s, %s, %s or empty (none)", r.Source, RailFromMap, RailFromSubnet, RailFromPCIRank)
	}
	if len(r.Map) > MaxRails {
		return fmt.Errorf("rails: %d entries, at most %d", len(r.Map), MaxRails)
	}
	for nic, rail := range r.Map {
		if !railRE.MatchString(rail) {
			return fmt.Errorf("rail of %s: %q is not 1-63 letters, digits, '.', '_' or '-'", nic, truncate(rail, 64))
		}
	}
	return nil
}

// ValidRail reports whether a published rail value is one the exporter can
// write: a rail name of the map or pci-rank, or an IPv4 subnet.
func ValidRail(v string) bool {
	if railRE.MatchString(v) {
		return true
	}
	_, ok := railSubnet(v)
	return ok && len(v) <= 18
}

// railOf is one NIC's rail and where it came from.
type railOf struct{ rail, source string }

// assignRails gives each RDMA PF of t its rail under r, by position in
// t.NICs; NICs without one are absent.
func assignRails(t *topology.Topology, r Rails) map[int]railOf {
	out := map[int]railOf{}
	var pfs []int
	for j, n := range t.NICs {
		if n.PhysFn == "" {
			pfs = append(pfs, j)
		}
	}
	if r.Source == RailFromPCIRank {
		slices.SortStableFunc(pfs, func(a, b int) int { return strings.Compare(t.NICs[a].PCI.Address, t.NICs[b].PCI.Address) })
		for rank, j := range pfs {
			out[j] = railOf{fmt.Sprint(rank), RailFromPCIRank}
		}
	}
	for _, j := range pfs {
		name := t.NICs[j].Name
		if r.Source == RailFromSubnet {
			if s, ok := railSubnet(r.Subnets[name]); ok {
				out[j] = railOf{s, RailFromSubnet}
			}
		}
		if rail, ok := r.Map[name]; ok {
			out[j] = railOf{rail, RailFromMap}
		}
	}
	return out
}

// railSubnet is the network of an interface prefix ("10.0.3.7/24" gives
// "10.0.3.0/24") when it can name a rail: IPv4, /30 or shorter.
func railSubnet(prefix string) (string, bool) {
	p, err := netip.ParsePrefix(prefix)
	if err != nil || !p.Addr().Is4() || p.Bits() > 30 {
		return "", false
	}
	return p.Masked().String(), true
}

// RailsOf is the rail of each RDMA PF of t under r, by RDMA device name, as
// the exporter publishes them (NICs without one are absent): what a harness
// reads to judge which rails a pod's NICs are on.
func RailsOf(t *topology.Topology, r Rails) map[string]string {
	out := map[string]string{}
	for j, ro := range assignRails(t, r) {
		out[t.NICs[j].Name] = ro.rail
	}
	return out
}
