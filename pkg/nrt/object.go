package nrt

import (
	"github.com/k8stopologyawareschedwg/noderesourcetopology-api/pkg/apis/topology/v1alpha2"

	"github.com/nicaffinity/nicaffinity/pkg/devices"
	"github.com/nicaffinity/nicaffinity/pkg/topology"
)

// ObjectFor is the object the exporter would publish for topo (a machine of
// the catalogue, or any topology): every GPU offered by bus ID, plus extra
// devices, and the GPUs at positions used held by another pod. The
// simulator's bench and the tests start from it.
func ObjectFor(node string, topo *topology.Topology, extra []devices.Device, used ...int) (*v1alpha2.NodeResourceTopology, []Problem) {
	snap := devices.Snapshot{Allocatable: extra}
	holder := devices.Pod{Namespace: "other", Name: "holder"}
	for i, g := range topo.GPUs {
		d := devices.Device{Resource: "nvidia.com/gpu", ID: g.PCI.Address}
		snap.Allocatable = append(snap.Allocatable, d)
		for _, u := range used {
			if u == i {
				holder.Devices = append(holder.Devices, d)
			}
		}
	}
	snap.Pods = []devices.Pod{holder}
	return Build(Input{Node: node, Topology: topo, Snapshot: snap, Resources: DefaultResources()})
}
