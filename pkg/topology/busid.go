package topology

import (
	"fmt"
	"strconv"
	"strings"
)

// NormalizeBusID turns a PCI address as any tool prints it ("00000000:1A:00.0"
// from NVML, "0000:1a:00.0" from sysfs, "1a:00.0" from lspci) into the sysfs
// spelling: lower case, a four-digit domain (more digits only when needed).
func NormalizeBusID(s string) (string, error) {
	parts := strings.Split(strings.TrimSpace(s), ":")
	var domain, bus, devfn string
	switch len(parts) {
	case 2:
		domain, bus, devfn = "0", parts[0], parts[1]
	case 3:
		domain, bus, devfn = parts[0], parts[1], parts[2]
	default:
		return "", fmt.Errorf("PCI address %.64q: want [domain:]bus:device.function", s)
	}
	dev, fn, ok := strings.Cut(devfn, ".")
	if !ok {
		return "", fmt.Errorf("PCI address %.64q: want [domain:]bus:device.function", s)
	}
	d, err1 := strconv.ParseUint(domain, 16, 32)
	b, err2 := strconv.ParseUint(bus, 16, 8)
	v, err3 := strconv.ParseUint(dev, 16, 8)
	f, err4 := strconv.ParseUint(fn, 16, 8)
	if err1 != nil || err2 != nil || err3 != nil || err4 != nil || len(bus) > 2 || len(dev) > 2 || len(fn) != 1 || len(domain) > 8 || v > 0x1f || f > 7 {
		return "", fmt.Errorf("PCI address %.64q: want [domain:]bus:device.function in hex", s)
	}
	return fmt.Sprintf("%04x:%02x:%02x.%x", d, b, v, f), nil
}

// Slot is the address without its function: functions of one device share it.
func Slot(busID string) string {
	if i := strings.LastIndexByte(busID, '.'); i > 0 {
		return busID[:i]
	}
	return busID
}
