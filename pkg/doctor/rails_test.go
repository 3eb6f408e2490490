package doctor

import (
	"strings"
	"testing"

	"github.com/k8stopologyawareschedwg/noderesourcetopology-api/pkg/apis/topology/v1alpha2"
	corev1 "k8s.io/api/core/v1"

	"github.com/nicaffinity/nicaffinity/pkg/machines"
	"github.com/nicaffinity/nicaffinity/pkg/nrt"
)

// TestRailsCheck: the rails check passes a cluster on one rail pattern and
// names the nodes that break it: a node without rails, a node whose map
// shifts its rails, a rail whose NICs differ in rate or link layer.
func TestRailsCheck(t *testing.T) {
	topo, err := machines.Load("hgx-h100-8gpu-8nic")
	if err != nil {
		t.Fatal(err)
	}
	object := func(name string, r nrt.Rails) *v1alpha2.NodeResourceTopology {
		obj, _ := nrt.Build(nrt.Input{Node: name, Topology: topo, Resources: nrt.DefaultResources(), Rails: r})
		return obj
	}
	byRank := nrt.Rails{Source: nrt.RailFromPCIRank}
	setAttr := func(obj *v1alpha2.NodeResourceTopology, zone, attr, value string) {
		for i := range obj.Zones {
			if obj.Zones[i].Name != zone {
				continue
			}
			for k := range obj.Zones[i].Attributes {
				if obj.Zones[i].Attributes[k].Name == attr {
					obj.Zones[i].Attributes[k].Value = value
				}
			}
		}
	}
	tests := []struct {
		name       string
		objects    map[string]*v1alpha2.NodeResourceTopology
		wantStatus Status
		wantDetail string
	}{
		{"no rails anywhere", map[string]*v1alpha2.NodeResourceTopology{"a": object("a", nrt.Rails{}), "b": object("b", nrt.Rails{})},
			Info, "no node publishes rails"},
		{"one pattern", map[string]*v1alpha2.NodeResourceTopology{"a": object("a", byRank), "b": object("b", byRank), "c": object("c", byRank)},
			Pass, "3 nodes on rails 0,1,2,3,4,5,6,7, each rail alike"},
		{"a node without rails", map[string]*v1alpha2.NodeResourceTopology{"a": object("a", byRank), "b": object("b", byRank), "c": object("c", nrt.Rails{})},
			Warn, "1 of 3 nodes are not on rails 0,1,2,3,4,5,6,7: c (none)"},
		{"a map that names other rails", map[string]*v1alpha2.NodeResourceTopology{"a": object("a", byRank), "b": object("b", byRank),
			"c": object("c", nrt.Rails{Source: nrt.RailFromPCIRank, Map: map[string]string{"mlx5_0": "8"}})},
			Warn, "c (1,2,3,4,5,6,7,8)"},
		{"a slower NIC on rail 3", func() map[string]*v1alpha2.NodeResourceTopology {
			b := object("b", byRank)
			setAttr(b, "nic-mlx5_3", nrt.AttrRate, "200 Gb/sec (4X HDR)")
			return map[string]*v1alpha2.NodeResourceTopology{"a": object("a", byRank), "b": b, "c": object("c", byRank)}
		}(), Warn, `rail 3: rate "400 Gb/sec (4X NDR)" but b mlx5_3 "200 Gb/sec (4X HDR)"`},
		{"an Ethernet NIC on an InfiniBand rail", func() map[string]*v1alpha2.NodeResourceTopology {
			c := object("c", byRank)
			setAttr(c, "nic-mlx5_5", nrt.AttrLinkLayer, "Ethernet")
			return map[string]*v1alpha2.NodeResourceTopology{"a": object("a", byRank), "b": object("b", byRank), "c": c}
		}(), Warn, `rail 5: link layer "InfiniBand" but c mlx5_5 "Ethernet"`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := ClusterState{NRTs: tc.objects}
			for name := range tc.objects {
				s.Nodes = append(s.Nodes, corev1.Node{})
				s.Nodes[len(s.Nodes)-1].Name = name
			}
			b := newBuilder("cluster")
			b.startLayer(LayerExporter)
			railsCheck(b, s)
			r := b.report()
			c := find(r, LayerExporter, "rails")
			if c == nil || c.Status != tc.wantStatus || !strings.Contains(c.Detail, tc.wantDetail) {
				t.Errorf("rails check = %+v, want %v containing %q", c, tc.wantStatus, tc.wantDetail)
			}
			if tc.wantStatus == Warn && c != nil && c.Fix == "" {
				t.Error("a warning without a fix")
			}
		})
	}
}
