package topology

import (
	"encoding/json"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestParseLink(t *testing.T) {
	tests := []struct {
		in      string
		want    Link
		wantErr bool
	}{
		{in: "X", want: Link{Level: LevelX}},
		{in: " PIX ", want: Link{Level: LevelPIX}},
		{in: "PXB", want: Link{Level: LevelPXB}},
		{in: "PHB", want: Link{Level: LevelPHB}},
		{in: "NODE", want: Link{Level: LevelNODE}},
		{in: "SYS", want: Link{Level: LevelSYS}},
		{in: "NV18", want: Link{Level: LevelNV, NVLinks: 18}},
		{in: "NV#", want: Link{Level: LevelNV}},
		{in: "NV", want: Link{Level: LevelNV}},
		{in: "NV0", wantErr: true},
		{in: "NV-2", wantErr: true},
		{in: "NVx", wantErr: true},
		{in: "pix", wantErr: true},
		{in: "", wantErr: true},
		{in: "SOC", wantErr: true},
	}
	for _, tc := range tests {
		t.Run(tc.in, func(t *testing.T) {
			got, err := ParseLink(tc.in)
			if (err != nil) != tc.wantErr {
				t.Fatalf("ParseLink(%q) error = %v, wantErr %v", tc.in, err, tc.wantErr)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("ParseLink(%q) (-want,+got):\n%s", tc.in, diff)
			}
		})
	}
}

func TestLevelOrder(t *testing.T) {
	order := []Level{LevelX, LevelNV, LevelPIX, LevelPXB, LevelPHB, LevelNODE, LevelSYS}
	for i := 1; i < len(order); i++ {
		if !(order[i-1] < order[i]) {
			t.Errorf("%v should be better than %v", order[i-1], order[i])
		}
	}
	for _, l := range order {
		back, err := ParseLevel(l.String())
		if err != nil || back != l {
			t.Errorf("ParseLevel(%q) = %v, %v; want %v", l.String(), back, err, l)
		}
	}
	gdr := map[Level]bool{LevelPIX: true, LevelPXB: true}
	for _, l := range order {
		if l.GPUDirectCapable() != gdr[l] {
			t.Errorf("%v.GPUDirectCapable() = %v", l, !gdr[l])
		}
	}
}

func TestLinkJSON(t *testing.T) {
	in := []Link{{Level: LevelNV, NVLinks: 12}, {Level: LevelPXB}}
	b, err := json.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	if string(b) != `["NV12","PXB"]` {
		t.Errorf("json = %s", b)
	}
	var back []Link
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(in, back); diff != "" {
		t.Errorf("round trip (-want,+got):\n%s", diff)
	}
	if err := json.Unmarshal([]byte(`["FAST"]`), &back); err == nil {
		t.Error("unknown level decoded without error")
	}
}
