// Package ncclxml imports NCCL topology XML (the NCCL_TOPO_FILE and
// NCCL_TOPO_DUMP_FILE format) into a topology.Topology.
//
// The XML names switches, not their ports, and has no host-bridge identity:
// it lists PCI trees under <cpu> elements. We read it the way NCCL does:
// devices under one <cpu> that share no <pci> bridge are PHB, devices under
// different <cpu> elements are SYS. Each <pci> bridge stands for one switch, so
// two devices under the same bridge are PIX and a device one bridge deeper is
// PXB. Broadcom PEX89xxx sub-switches are folded into their parent as
// everywhere else (see topology's level rule).
package ncclxml

import (
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"

	"github.com/nicaffinity/nicaffinity/pkg/topology"
)

// Note is what every imported topology says about the PHB reading.
const Note = "NCCL XML has no host-bridge identity: devices under one <cpu> that share no <pci> bridge are shown PHB, as NCCL reads them"

type element struct {
	XMLName  xml.Name
	Attrs    []xml.Attr `xml:",any,attr"`
	Children []element  `xml:",any"`
}

func (e *element) attr(name string) (string, bool) {
	for _, a := range e.Attrs {
		if a.Name.Local == name {
			return a.Value, true
		}
	}
	return "", false
}

func (e *element) child(name string) *element {
	for i := range e.Children {
		if e.Children[i].XMLName.Local == name {
			return &e.Children[i]
		}
	}
	return nil
}

// maxDepth bounds nesting so hostile input cannot recurse without end.
const maxDepth = 64

// Parse reads an NCCL topology XML document.
func Parse(r io.Reader) (*topology.Topology, error) {
	var root element
	dec := xml.NewDecoder(r)
	if err := dec.Decode(&root); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, fmt.Errorf("NCCL topology XML: empty document")
		}
		return nil, fmt.Errorf("NCCL topology XML: %w", err)
	}
	if root.XMLName.Local != "system" {
		return nil, fmt.Errorf("NCCL topology XML: root element is <%s>, want <system>", root.XMLName.Local)
	}
	im := importer{t: &topology.Topology{Source: "nccl-xml", Notes: []string{Note}}, bridges: map[string]bool{}}
	for i := range root.Children {
		c := &root.Children[i]
		if c.XMLName.Local != "cpu" {
			continue
		}
		if err := im.cpu(c, i); err != nil {
			return nil, err
		}
	}
	return im.finish()
}

type gpuRecord struct {
	gpu     topology.GPU
	host    string
	dev     int
	rank    int
	hasRank bool
	links   []nvlinkRecord
}

type nvlinkRecord struct {
	target string
	count  int
}

type importer struct {
	t       *topology.Topology
	bridges map[string]bool
	gpus    []gpuRecord
	unnamed int
}

func (im *importer) cpu(c *element, pos int) error {
	where := fmt.Sprintf("<cpu> #%d", pos)
	numa := 0
	if s, ok := c.attr("numaid"); ok {
		n, err := strconv.Atoi(s)
		if err != nil || n < -1 {
			return fmt.Errorf("%s: numaid %q is not a NUMA node number", where, s)
		}
		numa = n
	}
	host, _ := c.attr("host_hash")
	rc := topology.RootComplex{ID: fmt.Sprintf("cpu%d", pos), NUMANode: numa, Host: host}
	im.t.RootComplexes = append(im.t.RootComplexes, rc)
	cpus := ""
	if s, ok := c.attr("affinity"); ok && s != "" {
		l, err := topology.CPUListFromMask(s)
		if err != nil {
			return fmt.Errorf("%s: affinity: %w", where, err)
		}
		cpus = l
	}
	im.t.NUMANodes = append(im.t.NUMANodes, topology.NUMANode{ID: numa, CPUs: cpus})
	for i := range c.Children {
		ch := &c.Children[i]
		switch ch.XMLName.Local {
		case "pci":
			if err := im.pci(ch, rc, cpus, nil, 1); err != nil {
				return err
			}
		case "nic":
			for _, n := range ch.Children {
				name, _ := n.attr("name")
				im.t.Notes = append(im.t.Notes, fmt.Sprintf("network device %q under %s has no PCI device in the XML; left out", name, where))
			}
		}
	}
	return nil
}

func hexAttr(e *element, name string, bits int) (uint64, bool, error) {
	s, ok := e.attr(name)
	if !ok || s == "" {
		return 0, false, nil
	}
	v, err := strconv.ParseUint(strings.TrimPrefix(strings.ToLower(s), "0x"), 16, bits)
	if err != nil {
		return 0, false, fmt.Errorf("%s=%q is not a hex number", name, s)
	}
	return v, true, nil
}

// pci walks one <pci> element. chain is the bridge path so far in sysfs
// terms: root port, then upstream/downstream pairs; the XML's switches are the
// upstream ports and the ports around them are synthesised.
func (im *importer) pci(e *element, rc topology.RootComplex, cpus string, chain []string, depth int) error {
	if depth > maxDepth {
		return fmt.Errorf("<pci> elements nested deeper than %d", maxDepth)
	}
	raw, ok := e.attr("busid")
	if !ok {
		return fmt.Errorf("<pci> under %s without a busid", rc.ID)
	}
	busID, err := topology.NormalizeBusID(raw)
	if err != nil {
		return fmt.Errorf("<pci busid=%q>: %w", raw, err)
	}
	where := fmt.Sprintf("<pci busid=%q>", raw)
	class, _, err := hexAttr(e, "class", 24)
	if err != nil {
		return fmt.Errorf("%s: %w", where, err)
	}
	vendor, _, err := hexAttr(e, "vendor", 16)
	if err != nil {
		return fmt.Errorf("%s: %w", where, err)
	}
	device, _, err := hexAttr(e, "device", 16)
	if err != nil {
		return fmt.Errorf("%s: %w", where, err)
	}
	// Fused multi-host dumps repeat bus IDs: bridges are named per host.
	bridgeID := busID
	if rc.Host != "" {
		bridgeID = rc.Host + "/" + busID
	}
	if chain == nil {
		rp := "rootport:" + rc.ID + ":" + topology.Slot(busID)
		im.addBridge(topology.Bridge{Address: rp, Synthetic: true})
		chain = []string{rp}
	}
	if class&0xffff00 == 0x060400 {
		if im.bridges[bridgeID] {
			return fmt.Errorf("%s: bridge listed twice", where)
		}
		im.addBridge(topology.Bridge{Address: bridgeID, Vendor: uint16(vendor), Device: uint16(device)})
		for i := range e.Children {
			ch := &e.Children[i]
			if ch.XMLName.Local != "pci" {
				continue
			}
			cb, _ := ch.attr("busid")
			dn := "downstream:" + bridgeID + ">" + topology.Slot(strings.ToLower(cb))
			if !im.bridges[dn] {
				im.addBridge(topology.Bridge{Address: dn, Synthetic: true})
			}
			next := append(append(append([]string(nil), chain...), bridgeID), dn)
			if err := im.pci(ch, rc, cpus, next, depth+1); err != nil {
				return err
			}
		}
		return nil
	}
	fn := topology.PCIFunction{Address: busID, Vendor: uint16(vendor), Device: uint16(device), Class: uint32(class), NUMANode: rc.NUMANode, RootComplex: rc.ID, Bridges: chain}
	gpuEl, nicEl := e.child("gpu"), e.child("nic")
	switch {
	case gpuEl != nil || (class&0xff0000 == 0x030000 && (vendor == 0 || vendor == 0x10de)):
		return im.gpu(fn, gpuEl, cpus, rc.Host, where)
	case nicEl != nil:
		for i := range nicEl.Children {
			n := &nicEl.Children[i]
			if n.XMLName.Local != "net" {
				continue
			}
			nic, err := netOf(n, fn, where)
			if err != nil {
				return err
			}
			im.t.NICs = append(im.t.NICs, nic)
		}
	case class&0xffff00 == 0x020700 || class&0xffff00 == 0x020000:
		// Hand-written files list NICs by class alone; NCCL fills in the
		// RDMA name on the host. Name them by bus ID.
		im.t.NICs = append(im.t.NICs, topology.NIC{Name: busID, PCI: fn})
		im.unnamed++
	}
	return nil
}

// netOf reads one <net> of a NIC's <pci> at fn: its name, NCCL's gdr mark,
// its port and its speed.
func netOf(n *element, fn topology.PCIFunction, where string) (topology.NIC, error) {
	name, _ := n.attr("name")
	if name == "" {
		return topology.NIC{}, fmt.Errorf("%s: <net> without a name", where)
	}
	nic := topology.NIC{Name: name, PCI: fn}
	if g, _ := n.attr("gdr"); g == "0" {
		nic.GDR = topology.No // NCCL found no GPUDirect RDMA support on it
	}
	if p, ok := n.attr("port"); ok {
		port, err := strconv.Atoi(p)
		if err != nil {
			return topology.NIC{}, fmt.Errorf("%s: <net name=%q> port %q is not a number", where, name, p)
		}
		nic.Ports = []topology.Port{{Number: port}}
	}
	if sp, ok := n.attr("speed"); ok {
		// NCCL's speed is in Mb/s; the model keeps sysfs's wording.
		mbps, err := strconv.Atoi(sp)
		if err != nil || mbps < 0 || mbps > 100_000_000 {
			return topology.NIC{}, fmt.Errorf("%s: <net name=%q> speed %q is not a rate in Mb/s", where, name, sp)
		}
		if len(nic.Ports) == 0 {
			nic.Ports = []topology.Port{{Number: 1}}
		}
		nic.Ports[0].Rate = strconv.FormatFloat(float64(mbps)/1000, 'f', -1, 64) + " Gb/sec"
	}
	return nic, nil
}

func (im *importer) addBridge(b topology.Bridge) {
	im.bridges[b.Address] = true
	im.t.Bridges = append(im.t.Bridges, b)
}

func (im *importer) gpu(fn topology.PCIFunction, g *element, cpus, host, where string) error {
	rec := gpuRecord{gpu: topology.GPU{Index: -1, PCI: fn, CPUAffinity: cpus, MemoryNUMANode: -1}, dev: -1, host: host}
	if g != nil {
		if s, ok := g.attr("dev"); ok {
			n, err := strconv.Atoi(s)
			if err != nil || n < 0 {
				return fmt.Errorf("%s: <gpu dev=%q> is not a GPU number", where, s)
			}
			rec.dev = n
		}
		if s, _ := g.attr("gdr"); s == "0" {
			rec.gpu.GDR = topology.No
		}
		if s, ok := g.attr("rank"); ok {
			n, err := strconv.Atoi(s)
			if err != nil || n < 0 {
				return fmt.Errorf("%s: <gpu rank=%q> is not a rank", where, s)
			}
			rec.rank, rec.hasRank = n, true
		}
		for _, l := range g.Children {
			if l.XMLName.Local == "c2c" {
				// NCCL links the GPU to its CPU by C2C with count x bw
				// (ncclTopoAddC2c); a link count of 0 is no link.
				count, err := strconv.Atoi(attrOr(&l, "count", "0"))
				if err != nil || count < 0 {
					return fmt.Errorf("%s: <c2c count=%q> is not a number", where, attrOr(&l, "count", ""))
				}
				if count > 0 {
					rec.gpu.C2C = topology.C2CNCCLXML
				}
				continue
			}
			if l.XMLName.Local != "nvlink" {
				continue
			}
			target, _ := l.attr("target")
			count, err := strconv.Atoi(attrOr(&l, "count", "1"))
			if err != nil || count < 0 {
				return fmt.Errorf("%s: <nvlink target=%q> count is not a number", where, target)
			}
			rec.links = append(rec.links, nvlinkRecord{target: strings.ToLower(target), count: count})
		}
	}
	im.gpus = append(im.gpus, rec)
	return nil
}

func attrOr(e *element, name, def string) string {
	if s, ok := e.attr(name); ok {
		return s
	}
	return def
}

// finish numbers the GPUs (rank when every GPU has a distinct one, as in fused
// multi-host dumps; else dev; else bus order), pairs the NVLinks and checks the result.
func (im *importer) finish() (*topology.Topology, error) {
	t := im.t
	index := func(r gpuRecord) int { return r.dev }
	if allDistinct(im.gpus, func(r gpuRecord) (int, bool) { return r.rank, r.hasRank }) {
		index = func(r gpuRecord) int { return r.rank }
	} else if !allDistinct(im.gpus, func(r gpuRecord) (int, bool) { return r.dev, r.dev >= 0 }) {
		sort.SliceStable(im.gpus, func(i, j int) bool { return im.gpus[i].gpu.PCI.Address < im.gpus[j].gpu.PCI.Address })
		index = nil
	}
	sort.SliceStable(im.gpus, func(i, j int) bool {
		if index == nil {
			return false
		}
		return index(im.gpus[i]) < index(im.gpus[j])
	})
	for i := range im.gpus {
		if index != nil {
			im.gpus[i].gpu.Index = index(im.gpus[i])
		} else {
			im.gpus[i].gpu.Index = i
		}
		t.GPUs = append(t.GPUs, im.gpus[i].gpu)
	}
	t.NVLinks = pairLinks(im.gpus)
	qualifyFusedHosts(t)
	if im.unnamed > 0 {
		t.Notes = append(t.Notes, fmt.Sprintf("%d NICs have no RDMA device name in the XML; they are named by PCI bus ID", im.unnamed))
	}
	t.Sort()
	if err := t.Validate(); err != nil {
		return nil, fmt.Errorf("NCCL topology XML: %w", err)
	}
	return t, nil
}

func allDistinct(gpus []gpuRecord, key func(gpuRecord) (int, bool)) bool {
	seen := map[int]bool{}
	for _, g := range gpus {
		k, ok := key(g)
		if !ok || seen[k] {
			return false
		}
		seen[k] = true
	}
	return true
}

// pairLinks counts links between GPUs: a target that is another GPU's bus ID
// is a direct link; any other target (NVSwitch, the MNNVL fabric) is a switch.
// A target naming the GPU itself (seen in hand-written files) is ignored.
func pairLinks(gpus []gpuRecord) []topology.NVLink {
	n := len(gpus)
	hostOf := func(g gpuRecord) string { return g.host }
	pos := map[string]int{}
	indices := make([]int, n)
	for i, g := range gpus {
		pos[hostOf(g)+"/"+g.gpu.PCI.Address] = i
		indices[i] = g.gpu.Index
	}
	direct := make([][]int, n)
	toSwitch := make([]int, n)
	for i, g := range gpus {
		direct[i] = make([]int, n)
		for _, l := range g.links {
			target, err := topology.NormalizeBusID(l.target)
			if err != nil {
				target = l.target
			}
			switch j, ok := pos[hostOf(g)+"/"+target]; {
			case ok && j == i:
			case ok:
				direct[i][j] += l.count
			default:
				toSwitch[i] += l.count
			}
		}
	}
	return topology.PairNVLinks(indices, direct, toSwitch)
}

// qualifyFusedHosts renames RDMA devices of fused multi-host dumps (NCCL's
// MNNVL dumps repeat every name per host) to "<name>@<host number>".
func qualifyFusedHosts(t *topology.Topology) {
	hostNo := map[string]int{}
	rcHost := map[string]string{}
	for _, rc := range t.RootComplexes {
		if _, ok := hostNo[rc.Host]; !ok {
			hostNo[rc.Host] = len(hostNo)
		}
		rcHost[rc.ID] = rc.Host
	}
	if len(hostNo) < 2 {
		return
	}
	for i := range t.NICs {
		t.NICs[i].Name = fmt.Sprintf("%s@%d", t.NICs[i].Name, hostNo[rcHost[t.NICs[i].PCI.RootComplex]])
	}
	t.Notes = append(t.Notes, fmt.Sprintf("fused dump of %d hosts (host_hash): RDMA device names carry @<host number>, and devices of different hosts are SYS apart", len(hostNo)))
}
