package nrt

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/nicaffinity/nicaffinity/pkg/devices"
	"github.com/nicaffinity/nicaffinity/pkg/machines"
)

func TestParseRailMap(t *testing.T) {
	tests := []struct {
		in      string
		want    map[string]string
		wantErr string
	}{
		{"", map[string]string{}, ""},
		{"mlx5_0=0,mlx5_1=1", map[string]string{"mlx5_0": "0", "mlx5_1": "1"}, ""},
		{" mlx5_0=rail-a , mlx5_1=rail.b", map[string]string{"mlx5_0": "rail-a", "mlx5_1": "rail.b"}, ""},
		{"mlx5_0", nil, `rails entry "mlx5_0": want <rdma device>=<rail>`},
		{"=3", nil, "want <rdma device>=<rail>"},
		{"mlx5_0=", nil, `rail "" is not`},
		{"mlx5_0=a b", nil, `rail "a b" is not`},
		{"mlx5_0=" + strings.Repeat("r", 64), nil, "is not 1-63"},
		{"mlx5_0=-a", nil, "is not 1-63"},
		{"mlx5_0=1,mlx5_0=2", nil, "mlx5_0 given twice"},
		{strings.Repeat("n=1,", MaxRails) + "n=1", nil, "entries, at most"},
	}
	for _, tc := range tests {
		got, err := ParseRailMap(tc.in)
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("ParseRailMap(%.40q) error %v, want %q", tc.in, err, tc.wantErr)
			}
			continue
		}
		if err != nil {
			t.Errorf("ParseRailMap(%q): %v", tc.in, err)
		} else if diff := cmp.Diff(tc.want, got); diff != "" {
			t.Errorf("ParseRailMap(%q) (-want,+got):\n%s", tc.in, diff)
		}
	}
}

// TestRailsPublished: each source puts the rail, and where it came from, on
// the NIC zones; the map wins for the NICs it names; a /31 names none; the
// plugin's compile reads them back.
func TestRailsPublished(t *testing.T) {
	topo, err := machines.Load("hgx-h100-8gpu-8nic")
	if err != nil {
		t.Fatal(err)
	}
	snap := devices.Snapshot{}
	tests := []struct {
		name  string
		rails Rails
		want  map[string]string // NIC -> rail/source
	}{
		{"none by default", Rails{}, map[string]string{}},
		{"pci rank", Rails{Source: RailFromPCIRank}, map[string]string{
			"mlx5_0": "0/pci-rank", "mlx5_1": "1/pci-rank", "mlx5_2": "2/pci-rank", "mlx5_3": "3/pci-rank",
			"mlx5_4": "4/pci-rank", "mlx5_5": "5/pci-rank", "mlx5_6": "6/pci-rank", "mlx5_7": "7/pci-rank"}},
		{"map wins over pci rank", Rails{Source: RailFromPCIRank, Map: map[string]string{"mlx5_0": "r7"}}, map[string]string{
			"mlx5_0": "r7/map", "mlx5_1": "1/pci-rank", "mlx5_2": "2/pci-rank", "mlx5_3": "3/pci-rank",
			"mlx5_4": "4/pci-rank", "mlx5_5": "5/pci-rank", "mlx5_6": "6/pci-rank", "mlx5_7": "7/pci-rank"}},
		{"map only", Rails{Source: RailFromMap, Map: map[string]string{"mlx5_3": "3", "nope": "9"}}, map[string]string{"mlx5_3": "3/map"}},
		{"subnets, a /31 is no rail", Rails{Source: RailFromSubnet, Subnets: map[string]string{
			"mlx5_0": "10.0.0.7/24", "mlx5_1": "10.0.1.9/24", "mlx5_2": "10.0.2.4/31", "mlx5_3": "fd00::1/64", "mlx5_4": "garbage"}},
			map[string]string{"mlx5_0": "10.0.0.0/24/subnet", "mlx5_1": "10.0.1.0/24/subnet"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.rails.Validate(); err != nil {
				t.Fatal(err)
			}
			obj, _ := Build(Input{Node: "n", Topology: topo, Snapshot: snap, Resources: DefaultResources(), Rails: tc.rails})
			c, err := Compile(obj, "nvidia.com/gpu")
			if err != nil {
				t.Fatal(err)
			}
			got := map[string]string{}
			for _, n := range c.NICs {
				if n.Rail != "" {
					got[n.Name] = n.Rail + "/" + n.RailSource
				}
			}
			// Down NICs are not compiled: read the zones too.
			for _, z := range obj.Zones {
				if z.Type == ZoneNIC && AttrValue(z.Attributes, AttrRail) != "" {
					name := strings.TrimPrefix(z.Name, PrefixNIC)
					if _, ok := got[name]; !ok {
						got[name] = AttrValue(z.Attributes, AttrRail) + "/" + AttrValue(z.Attributes, AttrRailSource)
					}
				}
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("rails (-want,+got):\n%s", diff)
			}
		})
	}
	if err := (Rails{Source: "lldp"}).Validate(); err == nil {
		t.Error("Validate accepted source lldp")
	}
}

// TestCompileRefusesBadRails: a hostile rail value or source makes the
// object unreadable, naming the zone.
func TestCompileRefusesBadRails(t *testing.T) {
	topo, err := machines.Load("hgx-h100-8gpu-8nic")
	if err != nil {
		t.Fatal(err)
	}
	for _, bad := range [][2]string{{"a b", RailFromMap}, {"0", "guess"}, {strings.Repeat("9", 70), RailFromMap}, {"10.0.0.0/31", RailFromSubnet}} {
		obj, _ := Build(Input{Node: "n", Topology: topo, Resources: DefaultResources(), Rails: Rails{Source: RailFromPCIRank}})
		for i := range obj.Zones {
			z := &obj.Zones[i]
			for k := range z.Attributes {
				switch z.Attributes[k].Name {
				case AttrRail:
					z.Attributes[k].Value = bad[0]
				case AttrRailSource:
					z.Attributes[k].Value = bad[1]
				}
			}
		}
		if _, err := Compile(obj, "nvidia.com/gpu"); err == nil || !strings.Contains(err.Error(), "NIC zone nic-mlx5_0: rail") {
			t.Errorf("rail %q from %q: error %v", bad[0], bad[1], err)
		}
	}
}

// TestCompileRefusesBadNCCLPath: a hostile ncclPath makes the object
// unreadable, naming the zone and the attribute; an entry for a NIC that is
// not offered is ignored.
func TestCompileRefusesBadNCCLPath(t *testing.T) {
	topo, err := machines.Load("gb200-tray-4gpu-8nic")
	if err != nil {
		t.Fatal(err)
	}
	set := func(value string) error {
		obj, _ := Build(Input{Node: "n", Topology: topo, Resources: DefaultResources()})
		for i := range obj.Zones {
			z := &obj.Zones[i]
			for k := range z.Attributes {
				if z.Name == "gpu-0" && z.Attributes[k].Name == AttrNCCLPath {
					z.Attributes[k].Value = value
				}
			}
		}
		_, err := Compile(obj, "nvidia.com/gpu")
		return err
	}
	for _, bad := range []string{"mlx5_0=P2X", "mlx5_0", "=P2C", "mlx5_0=6", "mlx5_0=p2c", strings.Repeat("mlx5_0=P2C,", MaxNICs) + "mlx5_0=P2C"} {
		if err := set(bad); err == nil || !strings.Contains(err.Error(), "GPU zone gpu-0: attribute ncclPath") {
			t.Errorf("ncclPath %.40q: error %v", bad, err)
		}
	}
	if err := set("mlx5_0=P2C,mlx5_99=P2C"); err != nil {
		t.Errorf("an entry for a NIC that is not offered: %v", err)
	}
}
