package topology

import (
	"encoding/binary"
	"fmt"
	"strings"
)

// PCI Vital Product Data (PCI Local Bus 3.0, 6.4 and appendix I; PCIe Base
// 6.28): a list of resources, each a small one (tag byte 0xxxxyyy: item
// xxxx, yyy bytes of data) or a large one (tag byte 1xxxxxxx, then a
// two-byte little-endian length). The read-only resource (large, 0x90)
// holds keywords: two bytes of name, one of length, the data. The list
// ends at the small end tag (0x78). VPD is at most 32 KiB: its address
// register is 15 bits.
const (
	// MaxVPD is the most VPD a function can have.
	MaxVPD       = 32 << 10
	vpdLarge     = 0x80
	vpdIDString  = 0x82
	vpdReadOnly  = 0x90
	vpdReadWrite = 0x91
	vpdEnd       = 0x78
)

// VPDUniqueKeyword is the read-only keyword a ConnectX NIC and its Data
// Direct function both carry with one value: the kernel's mlx5 Data
// Direct driver looks the function's "VU" up (pci_vpd_find_ro_info_keyword)
// to match it to its NIC.
const VPDUniqueKeyword = "VU"

// VPDReadOnly returns the value of a read-only keyword of a function's VPD,
// as sysfs's vpd attribute gives it, and whether it is there. An empty
// VPD, or one that starts with no resource (0x00 or 0xff: the function has
// none), has no keywords. A resource or keyword running past the data, or
// VPD longer than MaxVPD, is an error; bytes past the end tag are ignored
// (a read of the whole window returns them). The value is trimmed of the
// spaces and NULs devices pad it with.
func VPDReadOnly(vpd []byte, keyword string) (string, bool, error) {
	if len(vpd) > MaxVPD {
		return "", false, fmt.Errorf("VPD of %d bytes, at most %d", len(vpd), MaxVPD)
	}
	if len(keyword) != 2 {
		return "", false, fmt.Errorf("VPD keyword %q: want two characters", keyword)
	}
	if len(vpd) == 0 {
		return "", false, nil
	}
	// Each step consumes at least one byte, so the loop is bounded by the
	// length checked above.
	for off := 0; off < len(vpd); {
		tag := vpd[off]
		switch {
		case tag == vpdEnd:
			return "", false, nil
		case off == 0 && (tag == 0x00 || tag == 0xff):
			return "", false, nil
		case tag&vpdLarge == 0:
			// A small resource other than the end tag: skip its data.
			off += 1 + int(tag&0x07)
			if off > len(vpd) {
				return "", false, fmt.Errorf("VPD small resource 0x%02x runs past the %d bytes read", tag, len(vpd))
			}
			continue
		}
		if off+3 > len(vpd) {
			return "", false, fmt.Errorf("VPD large resource 0x%02x at %d: its length runs past the %d bytes read", tag, off, len(vpd))
		}
		n := int(binary.LittleEndian.Uint16(vpd[off+1:]))
		data := off + 3
		if data+n > len(vpd) {
			return "", false, fmt.Errorf("VPD resource 0x%02x at %d: %d bytes run past the %d read", tag, off, n, len(vpd))
		}
		switch tag {
		case vpdIDString, vpdReadWrite:
		case vpdReadOnly:
			v, ok, err := vpdKeyword(vpd[data:data+n], keyword)
			if err != nil || ok {
				return v, ok, err
			}
		default:
			return "", false, fmt.Errorf("VPD resource tag 0x%02x at %d: want 0x82, 0x90, 0x91 or the end tag 0x78", tag, off)
		}
		off = data + n
	}
	return "", false, fmt.Errorf("VPD has no end tag in its %d bytes", len(vpd))
}

// vpdKeyword finds keyword among a read-only resource's keywords.
func vpdKeyword(ro []byte, keyword string) (string, bool, error) {
	for off := 0; off < len(ro); {
		if off+3 > len(ro) {
			return "", false, fmt.Errorf("VPD keyword at %d of the read-only resource runs past its %d bytes", off, len(ro))
		}
		name, n := string(ro[off:off+2]), int(ro[off+2])
		if off+3+n > len(ro) {
			return "", false, fmt.Errorf("VPD keyword %q: %d bytes run past the read-only resource", name, n)
		}
		if name == keyword {
			return strings.Trim(string(ro[off+3:off+3+n]), " \x00"), true, nil
		}
		off += 3 + n
	}
	return "", false, nil
}

// BuildVPD writes VPD with an identifier string and one read-only keyword
// (fixtures; the inverse of VPDReadOnly).
func BuildVPD(id, keyword, value string) []byte {
	var b []byte
	b = append(b, vpdIDString)
	b = binary.LittleEndian.AppendUint16(b, uint16(len(id)))
	b = append(b, id...)
	ro := append([]byte(keyword), byte(len(value)))
	ro = append(ro, value...)
	b = append(b, vpdReadOnly)
	b = binary.LittleEndian.AppendUint16(b, uint16(len(ro)))
	b = append(b, ro...)
	return append(b, vpdEnd)
}
