package nrt

import (
	"fmt"
	"maps"
	"math/bits"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/k8stopologyawareschedwg/noderesourcetopology-api/pkg/apis/topology/v1alpha2"
	"github.com/k8stopologyawareschedwg/podfingerprint"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/nicaffinity/nicaffinity/pkg/topology"
)

// Caps on what an object may hold. Objects are outside data: a node's
// exporter, or anyone who can write the object, could publish a huge one,
// and the scheduler compiles every object and searches each on every
// cycle. Real nodes are far below these.
const (
	// MaxGPUs is the most GPUs a compiled node may have: GPU sets are uint64 masks.
	MaxGPUs = 64
	// MaxNICs is the most NIC zones an object may have.
	MaxNICs = 64
	// MaxZones is the most zones of any type an object may have.
	MaxZones = 1024
	// MaxResourcesPerZone is the most resources one zone may list, and
	// MaxResources the most in all zones together.
	MaxResourcesPerZone = 64
	MaxResources        = 1024
	// MaxCostsPerZone is the most costs one zone may list: a GPU zone has
	// one per NIC and per other GPU (64 + 63 at most). MaxCosts is the
	// most in all zones together (64 GPU zones of 128).
	MaxCostsPerZone = 128
	MaxCosts        = MaxGPUs * MaxCostsPerZone
	// MaxAttributesPerZone is the most attributes one zone may carry, and
	// MaxAttributes the most in the object, zones and top level together.
	MaxAttributesPerZone = 128
	MaxAttributes        = 8192
	// MaxNameLen bounds zone, cost, attribute and resource names (a DNS
	// subdomain), and MaxValueLen attribute values (an ACS redirect list
	// of 64 NICs fits in 1.5 KiB).
	MaxNameLen  = 253
	MaxValueLen = 2048
	// MaxCount is the largest count a resource may give (capacity,
	// allocatable, available): 2^40, far past any device count and any
	// memory size the Node zones carry in bytes.
	MaxCount = 1 << 40
)

// GPUSet is a set of GPUs by position in Compiled.GPUs.
type GPUSet uint64

// Count is the number of GPUs in the set.
func (s GPUSet) Count() int { return bits.OnesCount64(uint64(s)) }

// Compiled is a NodeResourceTopology reduced to what the scheduler plugin
// decides on, built once when the object changes so Filter and Score do no
// parsing and no allocation.
type Compiled struct {
	Node            string
	ResourceVersion string
	Generation      int64
	Fingerprint     string
	// Heartbeat is when the exporter wrote the object (zero: an object
	// without the attribute, from an exporter before it).
	Heartbeat time.Time
	GPUs      []CompiledGPU
	NICs      []CompiledNIC
	// Free are the GPUs the node reports available; Healthy those it offers at all.
	Free, Healthy GPUSet
	// Near[l][n] are the GPUs at level l or closer to NIC n (l indexes
	// topology.Levels: PIX, PXB, P2C, PHB, NODE, SYS).
	Near [NumLevels][]GPUSet
	// AnyNear[l] are the GPUs with some NIC at level l or closer.
	AnyNear [NumLevels]GPUSet
	// BestLevel[g] is GPU g's closest NIC level (LevelSYS+1 with no NIC).
	BestLevel []topology.Level
	// SwitchOf[g] indexes Switches; Switches[s] are the GPUs under switch s,
	// and SwitchHasNIC[s] says whether an offered NIC sits there too.
	SwitchOf     []int
	Switches     []GPUSet
	SwitchHasNIC []bool
	// HostBlock is why GPUDirect RDMA cannot run on the node at all ("" when
	// it can or that is unknown).
	HostBlock string
	// HasP2C is whether some GPU-NIC pair is at P2C (the object says NCCL
	// gives it P2C): without one, P2C or closer is PXB or closer.
	HasP2C bool
}

// Shown is the level to name in messages about this node for level l: on a
// node without a P2C pair, P2C or closer reads as PXB or closer, which is
// the same set of pairs.
func (c *Compiled) Shown(l topology.Level) topology.Level {
	if l == topology.LevelP2C && !c.HasP2C {
		return topology.LevelPXB
	}
	return l
}

// CompiledGPU is one GPU zone.
type CompiledGPU struct {
	Zone  string
	BusID string
	UUID  string
	// Switch is the parent PCIeSwitch zone.
	Switch string
	// Level[n] is the level to NICs[n] that decisions use: the published
	// level, raised to PHB where GPUDirect RDMA cannot run on that path
	// (then Blocked[n] says why). A path through which NCCL cannot use
	// GPUDirect RDMA is no better than one through the host bridge.
	Level []topology.Level
	// Published[n] is the level the object gives.
	Published []topology.Level
	// Blocked[n] is why GPUDirect RDMA cannot run between this GPU and
	// NICs[n], "" when it can; nil when no path of the GPU is blocked.
	Blocked []string
}

// CompiledNIC is one NIC zone that is offered (state up).
type CompiledNIC struct {
	Zone   string
	Name   string
	Switch string
	// VFs are the free VFs per SR-IOV resource.
	VFs map[string]int64
	// Block is why GPUDirect RDMA cannot use this NIC ("" when it can).
	Block string
	// Rail is the NIC's rail ("" unknown) and RailSource where it came from.
	Rail, RailSource string
	// DataDirect: the NIC's DMA goes through a Data Direct function
	// (AttrDataDirect), so NCCL's PIX or PXB path to it is its level.
	DataDirect bool
}

// NumLevels is len(topology.Levels), the levels decisions index.
const NumLevels = 6

// LevelIndex maps PIX..SYS to 0..5 (topology.Levels); ok is false for others.
func LevelIndex(l topology.Level) (int, bool) {
	if l < topology.LevelPIX || l > topology.LevelSYS {
		return 0, false
	}
	return int(l - topology.LevelPIX), true
}

// Compile checks and reduces an object published under schema 1. Any
// inconsistency (missing zones, unknown levels, negative counts, a GPU with no
// NIC costs while NICs exist) is an error naming the zone: the caller treats
// the node as "topology unknown".
func Compile(obj *v1alpha2.NodeResourceTopology, gpuResource string) (*Compiled, error) {
	if obj == nil {
		return nil, fmt.Errorf("no object")
	}
	c := &Compiled{Node: obj.Name, ResourceVersion: obj.ResourceVersion, Generation: obj.Generation}
	if err := c.readAttributes(obj); err != nil {
		return nil, err
	}
	if err := checkSizes(obj); err != nil {
		return nil, err
	}
	zones, err := indexZones(obj)
	if err != nil {
		return nil, err
	}
	nicIndex, err := c.compileNICs(obj, zones)
	if err != nil {
		return nil, err
	}
	if err := c.compileGPUs(obj, zones, nicIndex, gpuResource); err != nil {
		return nil, err
	}
	if len(c.GPUs) == 0 {
		return nil, fmt.Errorf("no GPU zones")
	}
	c.orderGPUs()
	c.derive()
	return c, nil
}

// readAttributes reads the object's top-level attributes: the schema
// (another writer's object is named as such), the pod-set fingerprint, the
// host's GPUDirect facts and the heartbeat.
func (c *Compiled) readAttributes(obj *v1alpha2.NodeResourceTopology) error {
	schema, peerMem, dmaBuf := "", "", ""
	for _, a := range obj.Attributes {
		switch a.Name {
		case AttrSchema:
			schema = a.Value
		case podfingerprint.Attribute:
			c.Fingerprint = a.Value
		case AttrPeerMem:
			peerMem = a.Value
		case AttrDMABuf:
			dmaBuf = a.Value
		case AttrHeartbeat:
			t, err := time.Parse(time.RFC3339, a.Value)
			if err != nil {
				return fmt.Errorf("attribute %s: %q is not an RFC 3339 time", AttrHeartbeat, truncate(a.Value, 64))
			}
			c.Heartbeat = t
		}
	}
	if schema == "" {
		if others := OtherManagers(obj); len(others) > 0 {
			return fmt.Errorf("written by %s, not by nicaffinity's exporter, which does not overwrite another writer's object (docs/nrt-schema.md, Coexistence)", QuoteManagers(others))
		}
	}
	if !slices.Contains(SchemaVersions, schema) {
		return fmt.Errorf("attribute %s is %q, want one of %s (not published by a nicaffinity exporter this plugin knows)", AttrSchema, truncate(schema, 64), strings.Join(SchemaVersions, ", "))
	}
	c.HostBlock = topology.HostBlockOf(peerMem, dmaBuf)
	return nil
}

// indexZones maps zone names to zones, refusing nameless and repeated ones.
func indexZones(obj *v1alpha2.NodeResourceTopology) (map[string]*v1alpha2.Zone, error) {
	zones := map[string]*v1alpha2.Zone{}
	for i := range obj.Zones {
		z := &obj.Zones[i]
		if z.Name == "" {
			return nil, fmt.Errorf("zone %d has no name", i)
		}
		if _, dup := zones[z.Name]; dup {
			return nil, fmt.Errorf("zone %s appears twice", z.Name)
		}
		zones[z.Name] = z
	}
	return zones, nil
}

// compileNICs compiles the offered NIC zones (not published as down) and
// returns each one's position by zone name.
func (c *Compiled) compileNICs(obj *v1alpha2.NodeResourceTopology, zones map[string]*v1alpha2.Zone) (map[string]int, error) {
	nicIndex := map[string]int{}
	for _, z := range obj.Zones {
		if z.Type != ZoneNIC {
			continue
		}
		if !strings.HasPrefix(z.Name, PrefixNIC) {
			return nil, fmt.Errorf("NIC zone %s is not named %s<rdma device>", z.Name, PrefixNIC)
		}
		if p, ok := zones[z.Parent]; !ok || p.Type != ZonePCIeSwitch {
			return nil, fmt.Errorf("NIC zone %s: parent %q is not a PCIeSwitch zone", z.Name, z.Parent)
		}
		if state := AttrValue(z.Attributes, AttrState); state != "" && state != "ACTIVE" && state != "UNKNOWN" {
			continue // published as down: not offered
		}
		if len(c.NICs) == MaxNICs {
			return nil, fmt.Errorf("more than %d NIC zones", MaxNICs)
		}
		nic := CompiledNIC{Zone: z.Name, Name: strings.TrimPrefix(z.Name, PrefixNIC), Switch: z.Parent}
		port, _ := strconv.Atoi(AttrValue(z.Attributes, AttrPort))
		nic.Block = topology.PortBlock(nic.Name, topology.Port{Number: port, LinkLayer: AttrValue(z.Attributes, AttrLinkLayer), RoCEv2: AttrValue(z.Attributes, AttrRoCEv2)})
		if rail := AttrValue(z.Attributes, AttrRail); rail != "" {
			src := AttrValue(z.Attributes, AttrRailSource)
			if !ValidRail(rail) || !slices.Contains([]string{RailFromMap, RailFromSubnet, RailFromPCIRank}, src) {
				return nil, fmt.Errorf("NIC zone %s: rail %q from %q is not a rail from %s, %s or %s", z.Name, truncate(rail, 64), truncate(src, 64), RailFromMap, RailFromSubnet, RailFromPCIRank)
			}
			nic.Rail, nic.RailSource = rail, src
		}
		if dd := AttrValue(z.Attributes, AttrDataDirect); dd != "" {
			if _, err := topology.NormalizeBusID(dd); err != nil {
				return nil, fmt.Errorf("NIC zone %s: %s %q is not a PCI address", z.Name, AttrDataDirect, truncate(dd, 64))
			}
			nic.DataDirect = true
		}
		for _, r := range z.Resources {
			avail, err := count(z.Name, r)
			if err != nil {
				return nil, err
			}
			if nic.VFs == nil {
				nic.VFs = map[string]int64{}
			}
			nic.VFs[r.Name] = avail
		}
		nicIndex[z.Name] = len(c.NICs)
		c.NICs = append(c.NICs, nic)
	}
	return nicIndex, nil
}

// compileGPUs compiles the GPU zones: each GPU's level to every NIC (from
// its costs, raised to PHB where GPUDirect RDMA cannot run), and whether it
// is free and healthy.
func (c *Compiled) compileGPUs(obj *v1alpha2.NodeResourceTopology, zones map[string]*v1alpha2.Zone, nicIndex map[string]int, gpuResource string) error {
	for _, z := range obj.Zones {
		if z.Type != ZoneGPU {
			continue
		}
		if len(c.GPUs) == MaxGPUs {
			return fmt.Errorf("more than %d GPU zones", MaxGPUs)
		}
		if _, err := strconv.Atoi(strings.TrimPrefix(z.Name, PrefixGPU)); err != nil || !strings.HasPrefix(z.Name, PrefixGPU) {
			return fmt.Errorf("GPU zone %s is not named %s<index>", z.Name, PrefixGPU)
		}
		if p, ok := zones[z.Parent]; !ok || p.Type != ZonePCIeSwitch {
			return fmt.Errorf("GPU zone %s: parent %q is not a PCIeSwitch zone", z.Name, z.Parent)
		}
		g := CompiledGPU{Zone: z.Name, BusID: AttrValue(z.Attributes, AttrPCIBusID), UUID: AttrValue(z.Attributes, AttrUUID), Switch: z.Parent}
		var err error
		if g.Level, err = c.gpuLevels(&z, zones, nicIndex); err != nil {
			return err
		}
		g.Published = slices.Clone(g.Level)
		if err := c.gpuPaths(&g, &z, nicIndex); err != nil {
			return err
		}
		free, offered, found := int64(0), int64(0), false
		for _, r := range z.Resources {
			if r.Name != gpuResource {
				continue
			}
			avail, err := count(z.Name, r)
			if err != nil {
				return err
			}
			free, offered, found = avail, r.Allocatable.Value(), true
		}
		if !found {
			return fmt.Errorf("GPU zone %s has no %s resource", z.Name, gpuResource)
		}
		bit := GPUSet(1) << len(c.GPUs)
		if free > 0 {
			c.Free |= bit
		}
		if offered > 0 {
			c.Healthy |= bit
		}
		c.GPUs = append(c.GPUs, g)
	}
	return nil
}

// gpuLevels are a GPU zone's published levels to each NIC, from its costs
// (past SYS: no cost given, unreachable).
func (c *Compiled) gpuLevels(z *v1alpha2.Zone, zones map[string]*v1alpha2.Zone, nicIndex map[string]int) ([]topology.Level, error) {
	levels := make([]topology.Level, len(c.NICs))
	for n := range levels {
		levels[n] = topology.LevelSYS + 1
	}
	seen := 0
	for _, cost := range z.Costs {
		if !strings.HasPrefix(cost.Name, PrefixNIC) {
			continue
		}
		l, ok := LevelOf(cost.Value)
		if !ok || l == topology.LevelNV {
			return nil, fmt.Errorf("GPU zone %s: cost %d to %s is not a PCIe level", z.Name, cost.Value, cost.Name)
		}
		if n, ok := nicIndex[cost.Name]; ok {
			levels[n] = l
			seen++
		} else if _, exists := zones[cost.Name]; !exists {
			return nil, fmt.Errorf("GPU zone %s: cost to %s, which is no zone", z.Name, cost.Name)
		}
	}
	if seen == 0 && len(c.NICs) > 0 {
		return nil, fmt.Errorf("GPU zone %s has no costs to the node's NICs", z.Name)
	}
	return levels, nil
}

// gpuPaths turns g's published levels into the levels decisions use: P2C
// where NCCL's rule gives the pair P2C, and at least PHB on a path where
// GPUDirect RDMA cannot run (the host, the NIC or an ACS redirect), with
// the reason in Blocked.
func (c *Compiled) gpuPaths(g *CompiledGPU, z *v1alpha2.Zone, nicIndex map[string]int) error {
	acs, err := parseACSRedirect(z.Name, AttrValue(z.Attributes, AttrACSRedirect), nicIndex)
	if err != nil {
		return err
	}
	closer, err := parseNCCLPath(z.Name, AttrValue(z.Attributes, AttrNCCLPath), nicIndex)
	if err != nil {
		return err
	}
	for n, l := range closer {
		// NCCL's path is closer than the nvidia-smi level: P2C by NCCL's
		// C2C rule, or PIX/PXB measured from a NIC's Data Direct function
		// (docs/levels.md): the pair is aligned at NCCL's level, as the
		// exporter's own decision levels say (topology.AlignLevels). Other
		// NICs keep the nvidia-smi level for PIX and PXB.
		if l != topology.LevelP2C && !c.NICs[n].DataDirect {
			continue
		}
		if g.Level[n] > l {
			g.Level[n] = l
			c.HasP2C = c.HasP2C || l == topology.LevelP2C
		}
	}
	for n := range g.Level {
		why := c.HostBlock
		if why == "" {
			why = c.NICs[n].Block
		}
		if why == "" && acs[n] != "" {
			why = "ACS redirect on " + acs[n]
		}
		if why == "" {
			continue
		}
		if g.Blocked == nil {
			g.Blocked = make([]string, len(c.NICs))
		}
		g.Blocked[n] = why
		g.Level[n] = max(g.Level[n], topology.LevelPHB)
	}
	return nil
}

// orderGPUs puts the GPUs in index order, whatever order the object lists
// them in, with the free and healthy sets following.
func (c *Compiled) orderGPUs() {
	// GPU zones in index order, whatever order the object lists them in.
	order := make([]int, len(c.GPUs))
	for i := range order {
		order[i] = i
	}
	idx := func(i int) int { n, _ := strconv.Atoi(strings.TrimPrefix(c.GPUs[i].Zone, PrefixGPU)); return n }
	sort.SliceStable(order, func(a, b int) bool { return idx(order[a]) < idx(order[b]) })
	gpus := make([]CompiledGPU, len(c.GPUs))
	var free, healthy GPUSet
	for to, from := range order {
		gpus[to] = c.GPUs[from]
		if c.Free&(1<<from) != 0 {
			free |= 1 << to
		}
		if c.Healthy&(1<<from) != 0 {
			healthy |= 1 << to
		}
	}
	c.GPUs, c.Free, c.Healthy = gpus, free, healthy
}

// derive computes what Filter and Score read: each GPU's best level, the
// switches and which hold a NIC, and the GPUs near each NIC at each level.
func (c *Compiled) derive() {
	c.BestLevel = make([]topology.Level, len(c.GPUs))
	for g := range c.GPUs {
		c.BestLevel[g] = topology.LevelSYS + 1
		for _, l := range c.GPUs[g].Level {
			c.BestLevel[g] = min(c.BestLevel[g], l)
		}
	}
	switchIndex := map[string]int{}
	c.SwitchOf = make([]int, len(c.GPUs))
	for g := range c.GPUs {
		s, ok := switchIndex[c.GPUs[g].Switch]
		if !ok {
			s = len(c.Switches)
			switchIndex[c.GPUs[g].Switch] = s
			c.Switches = append(c.Switches, 0)
			c.SwitchHasNIC = append(c.SwitchHasNIC, false)
		}
		c.SwitchOf[g] = s
		c.Switches[s] |= 1 << g
	}
	for _, n := range c.NICs {
		if s, ok := switchIndex[n.Switch]; ok {
			c.SwitchHasNIC[s] = true
		}
	}
	for li, l := range topology.Levels {
		c.Near[li] = make([]GPUSet, len(c.NICs))
		for n := range c.NICs {
			for g := range c.GPUs {
				if c.GPUs[g].Level[n] <= l {
					c.Near[li][n] |= 1 << g
				}
			}
			c.AnyNear[li] |= c.Near[li][n]
		}
	}
}

// parseACSRedirect reads a GPU zone's acsRedirect attribute into the
// bridge per NIC position ("" for NICs it does not name).
func parseACSRedirect(zone, value string, nicIndex map[string]int) (map[int]string, error) {
	return parseNICList(zone, AttrACSRedirect, "bridge PCI address", value, nicIndex, func(v string) (string, bool) {
		addr, err := topology.NormalizeBusID(v)
		return addr, err == nil
	})
}

// parseNCCLPath reads a GPU zone's ncclPath attribute into the level of
// each NIC position whose NCCL path is one NCCL's defaults use GPUDirect
// RDMA on (PIX, PXB, P2C); farther paths leave the nvidia-smi level.
func parseNCCLPath(zone, value string, nicIndex map[string]int) (map[int]topology.Level, error) {
	paths, err := parseNICList(zone, AttrNCCLPath, "NCCL path type", value, nicIndex, topology.ParseNCCLPathName)
	if err != nil {
		return nil, err
	}
	out := map[int]topology.Level{}
	for n, p := range paths {
		switch p {
		case topology.PathPIX:
			out[n] = topology.LevelPIX
		case topology.PathPXB:
			out[n] = topology.LevelPXB
		case topology.PathP2C:
			out[n] = topology.LevelP2C
		}
	}
	return out, nil
}

// parseNICList reads a GPU zone attribute listing "<rdma device>=<value>"
// entries into the value per NIC position. Entries naming a NIC that is not
// offered are ignored; malformed ones, and values parse refuses, are
// errors naming the zone, the attribute and the entry (what says what a
// value should be).
func parseNICList[T any](zone, attr, what, value string, nicIndex map[string]int, parse func(string) (T, bool)) (map[int]T, error) {
	if value == "" {
		return nil, nil
	}
	entries := strings.Split(value, ",")
	if len(entries) > MaxNICs {
		return nil, fmt.Errorf("GPU zone %s: attribute %s has %d entries, at most %d", zone, attr, len(entries), MaxNICs)
	}
	out := make(map[int]T, len(entries))
	for _, e := range entries {
		nic, raw, ok := strings.Cut(e, "=")
		v, good := parse(raw)
		if !ok || nic == "" || !good {
			return nil, fmt.Errorf("GPU zone %s: attribute %s entry %q is not <rdma device>=<%s>", zone, attr, truncate(e, 64), what)
		}
		if n, found := nicIndex[PrefixNIC+nic]; found {
			out[n] = v
		}
	}
	return out, nil
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}

func count(zone string, r v1alpha2.ResourceInfo) (int64, error) {
	// Sign and Cmp read a quantity as it is, without the rescaling Value
	// does; they never turn an exponent into digits.
	for _, q := range []*resource.Quantity{&r.Capacity, &r.Allocatable, &r.Available} {
		if q.Sign() < 0 {
			return 0, fmt.Errorf("zone %s: resource %s has a negative count", zone, r.Name)
		}
		if q.Cmp(*maxCount) > 0 {
			return 0, fmt.Errorf("zone %s: resource %s has a count over %d", zone, r.Name, int64(MaxCount))
		}
	}
	capacity, alloc, avail := r.Capacity.Value(), r.Allocatable.Value(), r.Available.Value()
	if avail > alloc || alloc > capacity {
		return 0, fmt.Errorf("zone %s: resource %s has available %d > allocatable %d or allocatable > capacity %d", zone, r.Name, avail, alloc, capacity)
	}
	return avail, nil
}

var maxCount = resource.NewQuantity(MaxCount, resource.DecimalSI)

// checkNames holds the strings of zone z that errors may quote (its type,
// parent, cost, resource and attribute names) to MaxNameLen, as Decode
// does, and its attribute values to MaxValueLen: an error names at most a
// few of them, so its length stays bounded whatever the object holds.
func checkNames(z *v1alpha2.Zone) error {
	long := func(field, s string) error {
		return fmt.Errorf("zone %s: %s of %d bytes, at most %d", z.Name, field, len(s), MaxNameLen)
	}
	switch {
	case len(z.Type) > MaxNameLen:
		return long("type", z.Type)
	case len(z.Parent) > MaxNameLen:
		return long("parent", z.Parent)
	}
	for _, c := range z.Costs {
		if len(c.Name) > MaxNameLen {
			return long("cost name", c.Name)
		}
	}
	for _, r := range z.Resources {
		if len(r.Name) > MaxNameLen {
			return long("resource name", r.Name)
		}
	}
	for _, a := range z.Attributes {
		if len(a.Name) > MaxNameLen {
			return long("attribute name", a.Name)
		}
		if len(a.Value) > MaxValueLen {
			return fmt.Errorf("zone %s: attribute %.64s: value of %d bytes, at most %d", z.Name, a.Name, len(a.Value), MaxValueLen)
		}
	}
	return nil
}

// checkSizes holds a typed object to the caps Decode checks on the
// unstructured form (objects reach Compile from other paths too: tools,
// tests, the simulator).
func checkSizes(obj *v1alpha2.NodeResourceTopology) error {
	if len(obj.Zones) > MaxZones {
		return fmt.Errorf("%d zones: at most %d", len(obj.Zones), MaxZones)
	}
	attrs, costs, resources := len(obj.Attributes), 0, 0
	for i := range obj.Zones {
		z := &obj.Zones[i]
		switch {
		case len(z.Name) > MaxNameLen:
			return fmt.Errorf("zone %d: name of %d bytes, at most %d", i, len(z.Name), MaxNameLen)
		case len(z.Resources) > MaxResourcesPerZone:
			return fmt.Errorf("zone %s: %d resources, at most %d", z.Name, len(z.Resources), MaxResourcesPerZone)
		case len(z.Costs) > MaxCostsPerZone:
			return fmt.Errorf("zone %s: %d costs, at most %d", z.Name, len(z.Costs), MaxCostsPerZone)
		case len(z.Attributes) > MaxAttributesPerZone:
			return fmt.Errorf("zone %s: %d attributes, at most %d", z.Name, len(z.Attributes), MaxAttributesPerZone)
		}
		attrs, costs, resources = attrs+len(z.Attributes), costs+len(z.Costs), resources+len(z.Resources)
		if err := checkNames(z); err != nil {
			return err
		}
	}
	switch {
	case attrs > MaxAttributes:
		return fmt.Errorf("%d attributes in all, at most %d", attrs, MaxAttributes)
	case costs > MaxCosts:
		return fmt.Errorf("%d costs in all, at most %d", costs, MaxCosts)
	case resources > MaxResources:
		return fmt.Errorf("%d resources in all, at most %d", resources, MaxResources)
	}
	return nil
}

// OtherManagers lists the field managers of obj other than nicaffinity's
// exporter, sorted, without repeats.
func OtherManagers(obj *v1alpha2.NodeResourceTopology) []string {
	seen := map[string]bool{}
	for _, m := range obj.ManagedFields {
		if m.Manager != ExporterFieldManager {
			seen[m.Manager] = true
		}
	}
	return slices.Sorted(maps.Keys(seen))
}

// QuoteManagers names up to three field managers, quoted and each cut at 64
// bytes: a reason is read by people, and a name reaches it from the object.
func QuoteManagers(names []string) string {
	var q []string
	for i, n := range names {
		if i == 3 {
			q = append(q, fmt.Sprintf("%d more", len(names)-3))
			break
		}
		q = append(q, strconv.Quote(truncate(n, 64)))
	}
	return strings.Join(q, ", ")
}

// AttrValue is the value of the attribute name in list, "" when absent.
func AttrValue(list v1alpha2.AttributeList, name string) string {
	for _, a := range list {
		if a.Name == name {
			return a.Value
		}
	}
	return ""
}
