// Package nrt owns the NodeResourceTopology schema nicaffinity publishes
// (topology.node.k8s.io/v1alpha2): the exporter builds objects through it and
// the scheduler plugin reads them through it. docs/nrt-schema.md describes it.
package nrt

import (
	"github.com/nicaffinity/nicaffinity/pkg/apis/config"
	"github.com/nicaffinity/nicaffinity/pkg/topology"
)

// ExporterFieldManager is the server-side apply field manager under which
// nicaffinity's exporter writes; any other manager of an object is another
// writer, whose object the exporter leaves alone.
const ExporterFieldManager = "nicaffinity-topology-exporter"

// Zone types.
const (
	ZoneNode       = "Node"
	ZonePCIeSwitch = "PCIeSwitch"
	ZoneGPU        = "GPU"
	ZoneNIC        = "NIC"
)

// Zone name prefixes: node-<numa>, pcie-<switch>, gpu-<index>, nic-<rdma device>.
const (
	PrefixNode   = "node-"
	PrefixSwitch = "pcie-"
	PrefixGPU    = "gpu-"
	PrefixNIC    = "nic-"
)

// Attributes.
const (
	AttrSchema = "nicaffinity.io/schema"
	// AttrHeartbeat is when the exporter last wrote the object (RFC 3339,
	// UTC). The exporter rewrites it at least every resync period, so the
	// scheduler can tell an object nobody keeps current.
	AttrHeartbeat = "nicaffinity.io/heartbeat"
	// SchemaVersion is what the exporter publishes. Version 2 adds
	// AttrNCCLPath on GPU zones and AttrRail on NIC zones, both optional;
	// version 1 objects read as having neither (no P2C, rails unknown).
	SchemaVersion             = "2"
	AttrTopologyManagerPolicy = "topologyManagerPolicy"
	AttrTopologyManagerScope  = "topologyManagerScope"
	AttrPCIeRoot              = "pcieRoot"
	AttrUUID                  = "uuid"
	AttrPCIBusID              = "pciBusID"
	AttrNetdev                = "netdev"
	AttrLinkLayer             = "linkLayer"
	AttrPort                  = "port"
	AttrRate                  = "rate"
	AttrState                 = "state"
	// GPUDirect readiness (docs/nrt-schema.md, "GPUDirect readiness"), each
	// published only when known: an absent attribute reads as unknown.
	// On the object: nvidia-peermem "loaded"/"absent", dma-buf "yes"/"no",
	// IOMMU "off"/"passthrough"/"translated".
	AttrPeerMem = "nicaffinity.io/peermem"
	AttrDMABuf  = "nicaffinity.io/dmabuf"
	AttrIOMMU   = "nicaffinity.io/iommu"
	// On NIC zones: the first port's physical state, its netdev's MTU, and
	// for Ethernet whether it has a RoCE v2 GID ("yes"/"no").
	AttrPhysState = "physState"
	AttrMTU       = "mtu"
	AttrRoCEv2    = "rocev2GID"
	// AttrACSRedirect on GPU zones lists the NICs at PXB or closer whose
	// path from the GPU crosses a bridge with ACS P2P redirect on, each with
	// the first such bridge: "mlx5_0=0000:14:00.0,mlx5_1=0000:14:00.0".
	AttrACSRedirect = "acsRedirect"
	// AttrNCCLPath on GPU zones (schema 2) gives NCCL's path type to each
	// offered NIC (docs/levels.md, "Aligned: NCCL's rule"):
	// "mlx5_0=P2C,mlx5_1=P2C,mlx5_2=PHB". Costs keep the nvidia-smi level.
	AttrNCCLPath = "ncclPath"
	// AttrNVLinkDomain on GPU zones (schema 2) is the GPU's multi-node
	// NVLink domain, "<cluster uuid>/<clique>", when NVML knows one.
	AttrNVLinkDomain = "nvlinkDomain"
	// AttrRail on NIC zones (schema 2) is the NIC's rail, when known, and
	// AttrRailSource where it came from (RailFromMap, RailFromSubnet,
	// RailFromPCIRank).
	AttrRail       = "rail"
	AttrRailSource = "railSource"
	// AttrDataDirect on NIC zones (schema 2) is the PCI address of the
	// NIC's ConnectX-8 Data Direct function, when it has one: NCCL's
	// paths to the NIC (ncclPath) are then measured from that function,
	// and a PIX or PXB path there is the pair's level (docs/levels.md).
	AttrDataDirect = "dataDirect"
	// AttrHealth on GPU zones: "ok", or "missing" when the device plugin does
	// not offer the GPU (fallen off the bus, Xid, unhealthy).
	AttrHealth = "health"
)

// SchemaVersions are the versions the plugin reads.
var SchemaVersions = []string{"1", SchemaVersion}

// GPU health values.
const (
	HealthOK      = "ok"
	HealthMissing = "missing"
)

// Costs carry levels as these values (docs/nrt-schema.md: NV# 5, PIX 10 ... SYS 50).
var levelCost = map[topology.Level]int64{
	topology.LevelNV:   5,
	topology.LevelPIX:  10,
	topology.LevelPXB:  20,
	topology.LevelPHB:  30,
	topology.LevelNODE: 40,
	topology.LevelSYS:  50,
}

// CostOf is the cost value of a level.
func CostOf(l topology.Level) int64 { return levelCost[l] }

// LevelOf reads a cost value back; ok is false for values that are no level.
func LevelOf(cost int64) (topology.Level, bool) {
	for l, c := range levelCost {
		if c == cost {
			return l, true
		}
	}
	return 0, false
}

// Resources names the device-plugin resources the exporter and the plugin
// care about.
type Resources struct {
	// GPU is the NVIDIA device plugin's resource (nvidia.com/gpu). Its device
	// IDs are GPU UUIDs (or PCI bus IDs with deviceIDStrategy=... in simulations).
	GPU string `json:"gpu"`
	// SRIOV are the SR-IOV device plugin's resources; their device IDs are VF
	// PCI addresses.
	SRIOV []string `json:"sriov,omitempty"`
}

// DefaultResources are the names the NVIDIA Network Operator and SR-IOV
// Network Operator deployments use by default.
func DefaultResources() Resources {
	return Resources{GPU: config.DefaultGPUResourceName, SRIOV: config.DefaultSRIOVResourceNames()}
}

// IsSRIOV reports whether name is one of the SR-IOV resources.
func (r Resources) IsSRIOV(name string) bool {
	for _, s := range r.SRIOV {
		if s == name {
			return true
		}
	}
	return false
}
