// Package nvmlgpu reads GPU identity and NVLinks through NVML (go-nvml), behind
// nvml.Interface so tests run against go-nvml's mock servers.
package nvmlgpu

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/nicaffinity/nicaffinity/pkg/topology"
)

// ErrUnavailable means NVML cannot be used on this host (no driver, no GPU):
// callers fall back to sysfs and say so.
var ErrUnavailable = errors.New("NVML unavailable")

// Reader reads GPUs through one NVML library handle.
type Reader struct {
	lib nvml.Interface
}

// Option configures a Reader.
type Option func(*Reader)

// WithNVML uses lib instead of the host's libnvidia-ml (tests pass a mock).
func WithNVML(lib nvml.Interface) Option { return func(r *Reader) { r.lib = lib } }

// New returns a Reader of the host's NVML unless WithNVML says otherwise.
func New(opts ...Option) *Reader {
	r := &Reader{}
	for _, o := range opts {
		o(r)
	}
	if r.lib == nil {
		r.lib = nvml.New()
	}
	return r
}

// Read returns every GPU NVML sees with its index, UUID, bus ID, memory NUMA
// node, and the NVLinks between GPU pairs. It wraps ErrUnavailable when NVML
// cannot be initialised.
func (r *Reader) Read() (*topology.NVMLData, error) {
	if ret := r.lib.Init(); ret != nvml.SUCCESS {
		return nil, fmt.Errorf("%w: nvmlInit: %s", ErrUnavailable, r.lib.ErrorString(ret))
	}
	defer r.lib.Shutdown()
	count, ret := r.lib.DeviceGetCount()
	if ret != nvml.SUCCESS {
		return nil, fmt.Errorf("nvmlDeviceGetCount: %s", r.lib.ErrorString(ret))
	}
	data := &topology.NVMLData{}
	devices := make([]nvml.Device, count)
	byBus := map[string]int{}
	for i := 0; i < count; i++ {
		dev, ret := r.lib.DeviceGetHandleByIndex(i)
		if ret != nvml.SUCCESS {
			return nil, fmt.Errorf("GPU %d: nvmlDeviceGetHandleByIndex: %s", i, r.lib.ErrorString(ret))
		}
		devices[i] = dev
		g := topology.NVMLGPU{Index: i, MemoryNUMANode: -1}
		if g.UUID, ret = dev.GetUUID(); ret != nvml.SUCCESS {
			return nil, fmt.Errorf("GPU %d: nvmlDeviceGetUUID: %s", i, r.lib.ErrorString(ret))
		}
		if name, ret := dev.GetName(); ret == nvml.SUCCESS {
			g.Name = name
		}
		pci, ret := dev.GetPciInfo()
		if ret != nvml.SUCCESS {
			return nil, fmt.Errorf("GPU %d (%s): nvmlDeviceGetPciInfo: %s", i, g.UUID, r.lib.ErrorString(ret))
		}
		bus, err := busID(pci)
		if err != nil {
			return nil, fmt.Errorf("GPU %d (%s): %w", i, g.UUID, err)
		}
		g.BusID = bus
		// GPU memory is its own NUMA node only on coherent systems (GB200);
		// elsewhere the call fails or says -1.
		if numa, ret := dev.GetNumaNodeId(); ret == nvml.SUCCESS && numa >= 0 {
			g.MemoryNUMANode = numa
		}
		g.C2C = c2cLinked(dev)
		g.NVLinkDomain = nvlinkDomain(dev)
		byBus[bus] = i
		data.GPUs = append(data.GPUs, g)
	}
	data.NVLinks = nvlinks(devices, byBus)
	return data, nil
}

// maxC2CLinks caps the links asked about: Grace parts have up to 10.
const maxC2CLinks = 64

// c2cLinked reads whether the GPU has an active C2C link to its CPU the way
// NCCL does (xml.cc, ncclTopoGetXmlFromGpu): NVML's C2C link count, then
// each link's status, 1 being up. A GPU or driver that does not know the
// fields has none.
func c2cLinked(dev nvml.Device) bool {
	count := []nvml.FieldValue{{FieldId: nvml.FI_DEV_C2C_LINK_COUNT}}
	if dev.GetFieldValues(count) != nvml.SUCCESS || nvml.Return(count[0].NvmlReturn) != nvml.SUCCESS {
		return false
	}
	n := min(binary.LittleEndian.Uint32(count[0].Value[:4]), maxC2CLinks)
	for l := uint32(0); l < n; l++ {
		status := []nvml.FieldValue{{FieldId: nvml.FI_DEV_C2C_LINK_GET_STATUS, ScopeId: l}}
		if dev.GetFieldValues(status) == nvml.SUCCESS && nvml.Return(status[0].NvmlReturn) == nvml.SUCCESS &&
			binary.LittleEndian.Uint32(status[0].Value[:4]) == 1 {
			return true
		}
	}
	return false
}

// nvlinkDomain is the GPU's multi-node NVLink domain from NVML's fabric
// info, as NCCL compares it (transport/p2p, ncclTopoCheckMNNVL): registered
// with the fabric manager, and a cluster UUID that is not zero. NCCL reads
// GPUs of one cluster UUID and clique as reachable over NVLink.
func nvlinkDomain(dev nvml.Device) string {
	info, ret := dev.GetGpuFabricInfo() //nolint:staticcheck // the v4 call returns cliques NCCL does not read
	if ret != nvml.SUCCESS || info.State != nvml.GPU_FABRIC_STATE_COMPLETED || nvml.Return(info.Status) != nvml.SUCCESS {
		return ""
	}
	var zero [16]uint8
	if info.ClusterUuid == zero {
		return ""
	}
	u := info.ClusterUuid
	return fmt.Sprintf("%x-%x-%x-%x-%x/%d", u[0:4], u[4:6], u[6:8], u[8:10], u[10:16], info.CliqueId)
}

// nvlinks counts the active NVLinks of every GPU, to peers and to NVSwitches.
func nvlinks(devices []nvml.Device, byBus map[string]int) []topology.NVLink {
	n := len(devices)
	direct := make([][]int, n)
	toSwitch := make([]int, n)
	for i, dev := range devices {
		direct[i] = make([]int, n)
		for link := 0; link < nvml.NVLINK_MAX_LINKS; link++ {
			state, ret := dev.GetNvLinkState(link)
			if ret == nvml.ERROR_NOT_SUPPORTED || ret == nvml.ERROR_INVALID_ARGUMENT {
				break // no NVLink, or past the last link of this GPU
			}
			if ret != nvml.SUCCESS || state != nvml.FEATURE_ENABLED {
				continue
			}
			pci, ret := dev.GetNvLinkRemotePciInfo(link)
			if ret != nvml.SUCCESS {
				continue
			}
			remote, err := busID(pci)
			if err != nil {
				toSwitch[i]++ // NVSwitches without a PCI identity (MNNVL)
				continue
			}
			if j, ok := byBus[remote]; ok && j != i {
				direct[i][j]++
			} else if !ok {
				toSwitch[i]++
			}
		}
	}
	indices := make([]int, n)
	for i := range indices {
		indices[i] = i
	}
	return topology.PairNVLinks(indices, direct, toSwitch)
}

func busID(p nvml.PciInfo) (string, error) {
	b := make([]byte, 0, len(p.BusId))
	for _, c := range p.BusId {
		if c == 0 {
			break
		}
		b = append(b, byte(c))
	}
	if len(b) == 0 {
		return "", fmt.Errorf("NVML gave an empty PCI bus ID")
	}
	return topology.NormalizeBusID(string(b))
}
