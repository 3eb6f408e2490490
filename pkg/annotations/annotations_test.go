package annotations

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/nicaffinity/nicaffinity/pkg/topology"
)

func TestParseAllocation(t *testing.T) {
	got, err := ParseAllocation(`{"node":"n1","gpus":["00000000:1A:00.0"],"nics":["mlx5_0"],"level":"PIX","nrtGeneration":3}`)
	if err != nil {
		t.Fatal(err)
	}
	want := Allocation{Node: "n1", GPUs: []string{"0000:1a:00.0"}, NICs: []string{"mlx5_0"}, Level: "PIX", NRTGeneration: 3}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("(-want,+got):\n%s", diff)
	}
	for in, wantErr := range map[string]string{
		``:                                     "EOF",
		`{`:                                    "unexpected EOF",
		`{"gpus":[]}`:                          "no node",
		`{"node":"n","gpus":["x"]}`:            `gpus[0]: PCI address "x"`,
		`{"node":"n","level":"CLOSE"}`:         `level: topology level "CLOSE"`,
		`{"node":"n","extra":1}`:               `unknown field "extra"`,
		`{"node":"n","nrtGeneration":"seven"}`: "cannot unmarshal",
	} {
		if _, err := ParseAllocation(in); err == nil || !strings.Contains(err.Error(), wantErr) {
			t.Errorf("ParseAllocation(%q) error = %v, want %q", in, err, wantErr)
		}
	}
}

func TestParseRequestAnnotations(t *testing.T) {
	if l, err := ParseMaxLevel(" pxb"); err != nil || l != topology.LevelPXB {
		t.Errorf("ParseMaxLevel(pxb) = %v, %v", l, err)
	}
	for _, bad := range []string{"", "X", "NV18", "near"} {
		if _, err := ParseMaxLevel(bad); err == nil {
			t.Errorf("ParseMaxLevel(%q) gave no error", bad)
		}
	}
	if p, err := ParsePolicy("Preferred"); err != nil || p != PolicyPreferred {
		t.Errorf("ParsePolicy = %q, %v", p, err)
	}
	if _, err := ParsePolicy("maybe"); err == nil || !strings.Contains(err.Error(), Policy) {
		t.Errorf("ParsePolicy(maybe) error = %v", err)
	}
}

func FuzzParseAllocation(f *testing.F) {
	f.Add(`{"node":"n1","gpus":["0000:1a:00.0"],"nics":["mlx5_0"],"level":"PIX","nrtGeneration":3}`)
	f.Fuzz(func(t *testing.T, s string) {
		a, err := ParseAllocation(s)
		if err != nil {
			return
		}
		back, err := ParseAllocation(Marshal(a))
		if err != nil {
			t.Fatalf("re-parsing %q: %v", Marshal(a), err)
		}
		if diff := cmp.Diff(a, back); diff != "" {
			t.Fatalf("round trip (-first,+second):\n%s", diff)
		}
	})
}

func FuzzParseMaxLevel(f *testing.F) {
	f.Add("PXB")
	f.Fuzz(func(t *testing.T, s string) {
		if l, err := ParseMaxLevel(s); err == nil && (l < topology.LevelPIX || l > topology.LevelSYS) {
			t.Fatalf("%q accepted as %v", s, l)
		}
	})
}
