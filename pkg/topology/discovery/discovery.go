// Package discovery reads the topology of the host it runs on: sysfs for the
// PCIe tree and RDMA devices, NVML for GPU identity and NVLinks.
package discovery

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/nicaffinity/nicaffinity/pkg/topology"
	"github.com/nicaffinity/nicaffinity/pkg/topology/nvmlgpu"
	"github.com/nicaffinity/nicaffinity/pkg/topology/sysfs"
)

// NVML modes.
const (
	NVMLAuto = "auto" // use NVML when a driver is there
	NVMLOn   = "on"   // fail without it
	NVMLOff  = "off"
)

// NVMLReader is what discovery needs of NVML (nvmlgpu.Reader; tests pass fakes).
type NVMLReader interface {
	Read() (*topology.NVMLData, error)
}

// Host discovers one host.
type Host struct {
	SysfsRoot string
	NVMLMode  string
	NVML      NVMLReader
	// KernelRelease is the kernel's release (dma-buf support depends on
	// it); empty reads the running kernel's when SysfsRoot is the host's
	// /sys, and leaves it unknown for another tree.
	KernelRelease string
	// NVIDIAProc is the NVIDIA driver's procfs directory, where coherent
	// (C2C) GPUs have a numa_status; empty reads /proc/driver/nvidia when
	// SysfsRoot is the host's /sys, and nothing for another tree.
	NVIDIAProc string
}

// RunningKernel is the release of the kernel this process runs on (the
// host's, in a container too); "" when it cannot be read.
func RunningKernel() string {
	b, err := os.ReadFile("/proc/sys/kernel/osrelease")
	if err != nil || len(b) > 256 {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// ValidateNVMLMode checks a mode string.
func ValidateNVMLMode(mode string) error {
	switch mode {
	case NVMLAuto, NVMLOn, NVMLOff:
		return nil
	}
	return fmt.Errorf("NVML mode %q: want auto, on or off", mode)
}

// Discover reads the host. Without NVML (mode off, or auto with no driver) the
// GPUs come from sysfs and the topology's notes say so.
func (h Host) Discover() (*topology.Topology, error) {
	if err := ValidateNVMLMode(h.NVMLMode); err != nil {
		return nil, err
	}
	root, kernel := h.SysfsRoot, h.KernelRelease
	if root == "" {
		root = "/sys"
	}
	if kernel == "" && filepath.Clean(root) == "/sys" {
		kernel = RunningKernel()
	}
	opts := []sysfs.Option{sysfs.WithRoot(root), sysfs.WithKernelRelease(kernel)}
	if h.NVIDIAProc != "" {
		opts = append(opts, sysfs.WithNVIDIAProc(h.NVIDIAProc))
	}
	data, err := sysfs.New(opts...).Read()
	if err != nil {
		return nil, err
	}
	const fallback = "GPUs found in sysfs as NVIDIA display/3D controllers, numbered in PCI order; GPU pairs show PCIe levels, not NVLink"
	switch h.NVMLMode {
	case NVMLOff:
		data.Notes = append(data.Notes, "NVML not used (--nvml=off): "+fallback)
	default:
		reader := h.NVML
		if reader == nil {
			reader = nvmlgpu.New()
		}
		nv, err := reader.Read()
		switch {
		case err == nil:
			data.NVML = nv
		case h.NVMLMode == NVMLAuto && errors.Is(err, nvmlgpu.ErrUnavailable):
			data.Notes = append(data.Notes, fmt.Sprintf("NVML not used (%v): %s", err, fallback))
		default:
			return nil, err
		}
	}
	return topology.FromHostData(data)
}
