package topology

import (
	"bytes"
	"strings"
	"testing"
)

func TestVPDReadOnly(t *testing.T) {
	good := BuildVPD("NVIDIA ConnectX-8", "VU", "MT2412XZ0ABC")
	// A ConnectX-style VPD: several read-only keywords, the one asked for
	// after others, padded with NULs, and the window's 0xff after the end.
	var multi []byte
	multi = append(multi, 0x82, 3, 0, 'C', 'X', '8')
	ro := []byte("PN\x04MCX8SN\x02AB")
	ro = append(ro, "VU\x0eMT2412XZ0ABC\x00\x00"...)
	ro = append(ro, "RV\x01\x00"...)
	multi = append(multi, 0x90, byte(len(ro)), 0)
	multi = append(multi, ro...)
	multi = append(multi, 0x91, 2, 0, 'x', 'y', 0x78)
	multi = append(multi, bytes.Repeat([]byte{0xff}, 100)...)

	tests := []struct {
		name    string
		vpd     []byte
		want    string
		found   bool
		wantErr string
	}{
		{name: "one keyword", vpd: good, want: "MT2412XZ0ABC", found: true},
		{name: "among others, padded", vpd: multi, want: "MT2412XZ0ABC", found: true},
		{name: "empty", vpd: nil},
		{name: "no VPD (0xff)", vpd: bytes.Repeat([]byte{0xff}, 64)},
		{name: "no VPD (zeros)", vpd: make([]byte, 64)},
		{name: "end tag only", vpd: []byte{0x78}},
		{name: "keyword absent", vpd: BuildVPD("x", "SN", "123")},
		{name: "small resource skipped", vpd: append([]byte{0x71, 0}, good...), want: "MT2412XZ0ABC", found: true},
		{name: "too long", vpd: make([]byte, MaxVPD+1), wantErr: "at most 32768"},
		{name: "large length cut", vpd: []byte{0x82, 5}, wantErr: "its length runs past"},
		{name: "large data cut", vpd: []byte{0x82, 10, 0, 'a'}, wantErr: "run past the 4 read"},
		{name: "keyword cut", vpd: []byte{0x90, 2, 0, 'V', 'U', 0x78}, wantErr: "runs past its 2 bytes"},
		{name: "keyword data cut", vpd: []byte{0x90, 4, 0, 'V', 'U', 9, 'a', 0x78}, wantErr: `"VU": 9 bytes run past`},
		{name: "small resource cut", vpd: []byte{0x82, 0, 0, 0x77}, wantErr: "small resource 0x77 runs past"},
		{name: "unknown large tag", vpd: []byte{0x82, 0, 0, 0xa0, 0, 0, 0x78}, wantErr: "tag 0xa0"},
		{name: "no end tag", vpd: []byte{0x82, 1, 0, 'a'}, wantErr: "no end tag"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, found, err := VPDReadOnly(tc.vpd, VPDUniqueKeyword)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want || found != tc.found {
				t.Errorf("got %q, %v; want %q, %v", got, found, tc.want, tc.found)
			}
		})
	}
	if _, _, err := VPDReadOnly(good, "V"); err == nil {
		t.Error("a one-letter keyword was accepted")
	}
}

func FuzzVPDReadOnly(f *testing.F) {
	f.Add(BuildVPD("NVIDIA ConnectX-8", "VU", "MT2412XZ0ABC"))
	f.Add([]byte{0x82, 0, 0, 0x90, 4, 0, 'V', 'U', 1, 'a', 0x78})
	f.Add([]byte{0x71, 0, 0x78})
	f.Fuzz(func(t *testing.T, vpd []byte) {
		v, ok, err := VPDReadOnly(vpd, VPDUniqueKeyword)
		if err != nil && (ok || v != "") {
			t.Fatalf("an error with a value: %q, %v, %v", v, ok, err)
		}
		if len(v) > len(vpd) {
			t.Fatalf("value %q longer than the VPD", v)
		}
	})
}
