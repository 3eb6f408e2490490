package topology

import "testing"

func TestLevelRule(t *testing.T) {
	bridges := []Bridge{
		{Address: "rp1"}, {Address: "u1"}, {Address: "d1"}, {Address: "d2"}, {Address: "d3"},
		{Address: "u2"}, {Address: "d4"}, {Address: "d5"},
		{Address: "rp2"},
		{Address: "bu1", Vendor: 0x1000, Device: 0xc030}, {Address: "bd1", Vendor: 0x1000, Device: 0xc030},
		{Address: "bd2", Vendor: 0x1000, Device: 0xc030}, {Address: "bu2", Vendor: 0x1000, Device: 0xc030},
		{Address: "bd3", Vendor: 0x1000, Device: 0xc030}, {Address: "bu3", Vendor: 0x1000, Device: 0xc030},
		{Address: "bd4", Vendor: 0x1000, Device: 0xc030},
		{Address: "pu1", Vendor: 0x1000, Device: 0xc010}, {Address: "pd1", Vendor: 0x1000, Device: 0xc010},
		{Address: "pd2", Vendor: 0x1000, Device: 0xc010}, {Address: "pu2", Vendor: 0x1000, Device: 0xc010},
		{Address: "pd3", Vendor: 0x1000, Device: 0xc010},
	}
	topo := &Topology{
		RootComplexes: []RootComplex{{ID: "rcA", NUMANode: 0}, {ID: "rcB", NUMANode: -1}, {ID: "rcC", NUMANode: 1}, {ID: "rcD", NUMANode: 0, Host: "other"}},
		Bridges:       bridges,
	}
	f := func(rc string, addr string, path ...string) PCIFunction {
		return PCIFunction{Address: addr, RootComplex: rc, Bridges: path, NUMANode: -1}
	}
	tests := []struct {
		name string
		a, b PCIFunction
		want Level
	}{
		{"same function", f("rcA", "x", "rp1"), f("rcA", "x", "rp1"), LevelX},
		{"functions of one device on a root port", f("rcA", "a.0", "rp1"), f("rcA", "a.1", "rp1"), LevelPIX},
		{"siblings behind one switch", f("rcA", "a", "rp1", "u1", "d1"), f("rcA", "b", "rp1", "u1", "d2"), LevelPIX},
		{"functions behind one downstream port", f("rcA", "a.0", "rp1", "u1", "d1"), f("rcA", "a.1", "rp1", "u1", "d1"), LevelPIX},
		{"switch behind a switch", f("rcA", "a", "rp1", "u1", "d1", "u2", "d4"), f("rcA", "b", "rp1", "u1", "d2"), LevelPXB},
		{"both in the inner switch", f("rcA", "a", "rp1", "u1", "d1", "u2", "d4"), f("rcA", "b", "rp1", "u1", "d1", "u2", "d5"), LevelPIX},
		{"different root ports, one host bridge", f("rcA", "a", "rp1", "u1", "d1"), f("rcA", "b", "rp2"), LevelPHB},
		{"on the root bus", f("rcA", "a"), f("rcA", "b"), LevelPHB},
		{"host bridges on one NUMA node (-1 counts as 0)", f("rcA", "a", "rp1"), f("rcB", "b", "rp2"), LevelNODE},
		{"host bridges on two NUMA nodes", f("rcA", "a", "rp1"), f("rcC", "b", "rp2"), LevelSYS},
		{"other host", f("rcA", "a", "rp1"), f("rcD", "b", "rp2"), LevelSYS},
		{"PEX89xxx virtual sub-switches fold", f("rcA", "a", "rp1", "bu1", "bd1", "bu2", "bd2"), f("rcA", "b", "rp1", "bu1", "bd3", "bu3", "bd4"), LevelPIX},
		{"PEX88096 sub-switches do not fold", f("rcA", "a", "rp1", "pu1", "pd1", "pu2", "pd2"), f("rcA", "b", "rp1", "pu1", "pd3"), LevelPXB},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := topo.PCILevel(tc.a, tc.b); got != tc.want {
				t.Errorf("level = %v, want %v", got, tc.want)
			}
			if got := topo.PCILevel(tc.b, tc.a); got != tc.want {
				t.Errorf("reversed: level = %v, want %v", got, tc.want)
			}
		})
	}
}
