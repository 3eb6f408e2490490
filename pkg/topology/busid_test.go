package topology

import (
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestNormalizeBusID(t *testing.T) {
	tests := []struct{ in, want string }{
		{"00000000:1A:00.0", "0000:1a:00.0"},
		{"0000:1a:00.0", "0000:1a:00.0"},
		{"1a:00.1", "0000:1a:00.1"},
		{"10000:00:01.0", "10000:00:01.0"},
		{"fffffff:ff:ff.0", ""}, // device 0xff is not a PCI device number
		{"0000:1a:00", ""},
		{"0000:1a:00.8", ""},
		{"0000:100:00.0", ""},
		{"g000:1a:00.0", ""},
		{"", ""},
	}
	for _, tc := range tests {
		got, err := NormalizeBusID(tc.in)
		if tc.want == "" {
			if err == nil {
				t.Errorf("NormalizeBusID(%q) = %q, want an error", tc.in, got)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("NormalizeBusID(%q) = %q, %v; want %q", tc.in, got, err, tc.want)
		}
	}
}

func FuzzNormalizeBusID(f *testing.F) {
	for _, s := range []string{"00000000:1A:00.0", "1a:00.1", "::.", "0:0:0.0"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got, err := NormalizeBusID(s)
		if err != nil {
			return
		}
		again, err := NormalizeBusID(got)
		if err != nil || again != got {
			t.Fatalf("not idempotent: %q -> %q -> %q, %v", s, got, again, err)
		}
	})
}

func TestParseCPUList(t *testing.T) {
	tests := []struct {
		in   string
		want []int
	}{
		{"", nil},
		{"0", []int{0}},
		{"0-3,8,6-7\n", []int{0, 1, 2, 3, 6, 7, 8}},
		{"2-3,0-3", []int{0, 1, 2, 3}},
	}
	for _, tc := range tests {
		got, err := ParseCPUList(tc.in)
		if err != nil {
			t.Errorf("ParseCPUList(%q): %v", tc.in, err)
			continue
		}
		if diff := cmp.Diff(tc.want, got); diff != "" {
			t.Errorf("ParseCPUList(%q) (-want,+got):\n%s", tc.in, diff)
		}
	}
	for _, bad := range []string{"a", "3-1", "-1", "0-65536", "0-999999999999", "1,,2", "1-2-3"} {
		if _, err := ParseCPUList(bad); err == nil {
			t.Errorf("ParseCPUList(%q) gave no error", bad)
		}
	}
}

func TestCPUListFromMask(t *testing.T) {
	tests := []struct{ in, want string }{
		{"00000000,00000000,00ffffff", "0-23"},
		{"0000,000fffff,ff000000,0fffffff", "0-27,56-83"},
		{"00000001", "0"},
		{"80000000,00000001", "0,63"},
		{"0", ""},
		{"fff0000", "16-27"}, // short groups are numbers too (OCI B4.8 numaid 7)
		{"ffffffff", "0-31"},
		{"00000001,ffffffff", "0-32"},
		{"80000000,00000000,00000001", "0,95"},
		{strings.Repeat("ffffffff,", maxMaskGroups-1) + "ffffffff", fmt.Sprintf("0-%d", 32*maxMaskGroups-1)},
	}
	for _, tc := range tests {
		got, err := CPUListFromMask(tc.in)
		if err != nil || got != tc.want {
			t.Errorf("CPUListFromMask(%q) = %q, %v; want %q", tc.in, got, err, tc.want)
		}
	}
	for _, bad := range []string{"", "xyz", "1,,2", "123456789", strings.Repeat("0,", maxMaskGroups) + "0"} {
		if _, err := CPUListFromMask(bad); err == nil {
			t.Errorf("CPUListFromMask(%q) gave no error", bad)
		}
	}
}

func FuzzCPUListFromMask(f *testing.F) {
	f.Add("ffff,fff00000,00ffffff,f0000000")
	f.Fuzz(func(t *testing.T, s string) {
		if len(s) > 4096 {
			return
		}
		_, _ = CPUListFromMask(s)
	})
}
