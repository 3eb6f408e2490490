package annotations

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/nicaffinity/nicaffinity/pkg/topology"
)

func TestParseAllocation(t *testing.T) {
	got, err := ParseAllocation(`{"node":"n1","gpus":["00000000:1A:00.0"],"nics":["mlx5_0"],"level":"PIX","rails":["0","rail-1"],"nrtGeneration":3}`)
	if err != nil {
		t.Fatal(err)
	}
	want := Allocation{Node: "n1", GPUs: []string{"0000:1a:00.0"}, NICs: []string{"mlx5_0"}, Level: "PIX", Rails: []string{"0", "rail-1"}, NRTGeneration: 3}
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
		`{"node":"n","rails":["1","0"]}`:       "rails[1]",
		`{"node":"n","rails":["0","0"]}`:       "rails[1]",
		`{"node":"n","rails":[""]}`:            "rails[0]",
		`{"node":"n","rails":["a b"]}`:         "rails[0]",
		`{"node":"n","rails":["` + strings.Repeat("r", 64) + `"]}`:               "rails[0]",
		`{"node":"n","rails":[` + strings.Repeat(`"r",`, MaxPlanRails) + `"s"]}`: "at most 64",
		`{"node":"n","nics":[` + strings.Repeat(`"m",`, MaxDevices) + `"n"]}`:    "65 nics, at most 64",
		`{"node":"` + strings.Repeat("n", MaxValueBytes) + `"}`:                  "bytes, at most 16384",
	} {
		if _, err := ParseAllocation(in); err == nil || !strings.Contains(err.Error(), wantErr) {
			t.Errorf("ParseAllocation(%q) error = %v, want %q", in, err, wantErr)
		}
	}
}

func TestParseObserved(t *testing.T) {
	got, err := ParseObserved(`{"gpus":[{"busID":"00000000:1A:00.0","nic":"mlx5_0","level":"PIX"}],"nics":["mlx5_0"],"level":"PIX","aligned":true,"plan":"matched"}`)
	if err != nil {
		t.Fatal(err)
	}
	want := Observed{GPUs: []ObservedGPU{{BusID: "0000:1a:00.0", NIC: "mlx5_0", Level: "PIX"}}, NICs: []string{"mlx5_0"}, Level: "PIX", Aligned: true, Plan: "matched"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("(-want,+got):\n%s", diff)
	}
	for in, wantErr := range map[string]string{
		``:                                       "EOF",
		`{"gpus":[{"busID":"x"}],"plan":"none"}`: `gpus[0].busID: PCI address "x"`,
		`{"gpus":[{"busID":"0000:1a:00.0","level":"FAR"}],"plan":"none"}`:             `gpus[0].level`,
		`{"level":"NV","plan":"none"}`:                                                "",
		`{"level":"NEAR","plan":"none"}`:                                              `level: topology level "NEAR"`,
		`{"plan":"maybe"}`:                                                            `plan "maybe"`,
		`{"plan":"none","extra":1}`:                                                   `unknown field "extra"`,
		`{"plan":"none","gpudirect":[` + strings.Repeat(`"x",`, MaxDevices) + `"y"]}`: "65 gpudirect reasons, at most 64",
		`{"plan":"none","gpus":[` + strings.Repeat(`{"busID":"0000:1a:00.0"},`, MaxDevices) + `{"busID":"0000:1a:00.0"}]}`: "65 gpus, at most 64",
		`{"plan":"` + strings.Repeat("x", MaxValueBytes) + `"}`:                                                            "bytes, at most 16384",
	} {
		_, err := ParseObserved(in)
		if wantErr == "" {
			if err != nil {
				t.Errorf("ParseObserved(%q) error = %v", in, err)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), wantErr) {
			t.Errorf("ParseObserved(%q) error = %v, want %q", in, err, wantErr)
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
	for in, want := range map[string]string{"required": PolicyRequired, " Preferred": PolicyPreferred, "IGNORE": PolicyIgnore} {
		if p, err := ParseRails(in); err != nil || p != want {
			t.Errorf("ParseRails(%q) = %q, %v; want %q", in, p, err, want)
		}
	}
	if _, err := ParseRails("spine"); err == nil || !strings.Contains(err.Error(), Rails) {
		t.Errorf("ParseRails(spine) error = %v", err)
	}
}

// maxErrLen bounds a parse error's text: annotations are written by others
// and can be 256 KiB, and the errors reach Events and logs.
const maxErrLen = 512

func FuzzParseAllocation(f *testing.F) {
	f.Add(`{"node":"n1","gpus":["0000:1a:00.0"],"nics":["mlx5_0"],"level":"PIX","nrtGeneration":3}`)
	f.Add(`{"` + strings.Repeat("x", 1000) + `":1}`)
	f.Add(`{"node":"n1","gpus":["` + strings.Repeat("1", 1000) + `"],"nics":["` + strings.Repeat("m", 900) + `","` + strings.Repeat("m", 900) + `"]}`)
	f.Fuzz(func(t *testing.T, s string) {
		a, err := ParseAllocation(s)
		if err != nil {
			if len(err.Error()) > maxErrLen {
				t.Fatalf("an error of %d bytes: %.200s", len(err.Error()), err)
			}
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

func FuzzParseObserved(f *testing.F) {
	f.Add(`{"gpus":[{"busID":"0000:1a:00.0","nic":"mlx5_0","level":"PIX"}],"level":"PIX","aligned":true,"plan":"matched"}`)
	f.Add(`{"level":"` + strings.Repeat("P", 1000) + `","plan":"` + strings.Repeat("m", 1000) + `"}`)
	f.Fuzz(func(t *testing.T, s string) {
		o, err := ParseObserved(s)
		if err != nil {
			if len(err.Error()) > maxErrLen {
				t.Fatalf("an error of %d bytes: %.200s", len(err.Error()), err)
			}
			return
		}
		back, err := ParseObserved(Marshal(o))
		if err != nil {
			t.Fatalf("re-parsing %q: %v", Marshal(o), err)
		}
		if diff := cmp.Diff(o, back); diff != "" {
			t.Fatalf("round trip (-first,+second):\n%s", diff)
		}
	})
}

func FuzzParseMaxLevel(f *testing.F) {
	f.Add("PXB")
	f.Fuzz(func(t *testing.T, s string) {
		if l, err := ParseMaxLevel(s); err == nil && (l < topology.LevelPIX || l > topology.LevelSYS) {
			t.Fatalf("%q accepted as %v", s, l)
		} else if err != nil && len(err.Error()) > maxErrLen {
			t.Fatalf("an error of %d bytes: %.200s", len(err.Error()), err)
		}
	})
}

// TestParseAllocationRefusesRepeats: a plan names each GPU, UUID and NIC
// once.
func TestParseAllocationRefusesRepeats(t *testing.T) {
	for _, s := range []string{
		`{"node":"n","gpus":["0000:10:00.0","0000:10:00.0"]}`,
		`{"node":"n","gpus":["0000:10:00.0","10:00.0"]}`,
		`{"node":"n","gpus":["0000:10:00.0","0000:20:00.0"],"uuids":["GPU-0","GPU-0"]}`,
		`{"node":"n","gpus":["0000:10:00.0"],"nics":["mlx5_0","mlx5_0"]}`,
	} {
		if _, err := ParseAllocation(s); err == nil || !strings.Contains(err.Error(), "appears twice") {
			t.Errorf("%s: %v, want a refusal", s, err)
		}
	}
}
