// Package nvmltest builds go-nvml mock servers with the PCI bus IDs and
// NVLinks of a fixture machine, filling the gaps the stock mocks leave
// (empty bus IDs, no NUMA or NVLink functions).
package nvmltest

import (
	"encoding/binary"
	"fmt"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxa100"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxh100"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"
)

// NVSwitchServer returns a mock NVML whose GPUs sit at busIDs (in index order)
// and each reach the NVSwitches over links NVLinks. With links == 12 it starts
// from the DGX A100 mock, else from the DGX H100 one.
func NVSwitchServer(busIDs []string, links int) (*server.Server, error) {
	s := dgxh100.New()
	if links == 12 {
		s = dgxa100.New()
	}
	return s, WithNVSwitches(s, busIDs, links)
}

// WithNVSwitches fills the gaps of a stock mock server: bus IDs, no GPU NUMA
// node, and links NVLinks from every GPU into four NVSwitches.
func WithNVSwitches(s *server.Server, busIDs []string, links int) error {
	if len(busIDs) > len(s.Devices) {
		return fmt.Errorf("mock has %d GPUs, fixture %d", len(s.Devices), len(busIDs))
	}
	s.Devices = s.Devices[:len(busIDs)]
	for i, d := range s.Devices {
		dev := d.(*server.Device)
		SetBusID(dev, busIDs[i])
		dev.GetNumaNodeIdFunc = func() (int, nvml.Return) { return 0, nvml.ERROR_NOT_SUPPORTED }
		SetC2CLinks(dev, 0)
		SetFabric(dev, [16]uint8{}, 0)
		dev.GetNvLinkStateFunc = func(link int) (nvml.EnableState, nvml.Return) {
			if link >= links {
				return nvml.FEATURE_DISABLED, nvml.ERROR_INVALID_ARGUMENT
			}
			return nvml.FEATURE_ENABLED, nvml.SUCCESS
		}
		dev.GetNvLinkRemotePciInfoFunc = func(link int) (nvml.PciInfo, nvml.Return) {
			// Four NVSwitches, as on HGX H100 boards.
			return PciInfo(fmt.Sprintf("00000000:%02X:00.0", 0xf0+link%4)), nvml.SUCCESS
		}
	}
	// DeviceGetCount and the handle lookups read s.Devices.
	return nil
}

// SetC2CLinks makes the mock device answer NVML's C2C fields with links
// active C2C links (0: the fields are not supported, as on PCIe GPUs).
func SetC2CLinks(dev *server.Device, links int) {
	dev.GetFieldValuesFunc = func(values []nvml.FieldValue) nvml.Return {
		for i := range values {
			v := &values[i]
			switch {
			case links == 0:
				v.NvmlReturn = uint32(nvml.ERROR_NOT_SUPPORTED)
			case v.FieldId == nvml.FI_DEV_C2C_LINK_COUNT:
				v.NvmlReturn = uint32(nvml.SUCCESS)
				binary.LittleEndian.PutUint32(v.Value[:4], uint32(links))
			case v.FieldId == nvml.FI_DEV_C2C_LINK_GET_STATUS && int(v.ScopeId) < links:
				v.NvmlReturn, v.Value = uint32(nvml.SUCCESS), [8]byte{1}
			default:
				v.NvmlReturn = uint32(nvml.ERROR_INVALID_ARGUMENT)
			}
		}
		return nvml.SUCCESS
	}
}

// SetFabric makes the mock device report a multi-node NVLink fabric:
// registered in cluster with clique; a zero cluster is no fabric (the call
// not supported, as on GPUs outside NVL72 racks).
func SetFabric(dev *server.Device, cluster [16]uint8, clique uint32) {
	dev.GetGpuFabricInfoFunc = func() (nvml.GpuFabricInfo, nvml.Return) {
		if cluster == ([16]uint8{}) {
			return nvml.GpuFabricInfo{}, nvml.ERROR_NOT_SUPPORTED
		}
		return nvml.GpuFabricInfo{ClusterUuid: cluster, CliqueId: clique, State: nvml.GPU_FABRIC_STATE_COMPLETED, Status: uint32(nvml.SUCCESS)}, nvml.SUCCESS
	}
}

// SetBusID makes the mock device report busID from GetPciInfo.
func SetBusID(dev *server.Device, busID string) {
	dev.PciBusID = busID
	deviceID := dev.Config.PciDeviceId
	dev.GetPciInfoFunc = func() (nvml.PciInfo, nvml.Return) {
		p := PciInfo(busID)
		p.PciDeviceId = deviceID
		return p, nvml.SUCCESS
	}
}

// PciInfo fills BusId the way NVML does.
func PciInfo(busID string) nvml.PciInfo {
	var p nvml.PciInfo
	for i := 0; i < len(busID) && i < len(p.BusId)-1; i++ {
		p.BusId[i] = int8(busID[i])
	}
	return p
}
