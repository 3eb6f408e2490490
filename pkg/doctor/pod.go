package doctor

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/k8stopologyawareschedwg/noderesourcetopology-api/pkg/apis/topology/v1alpha2"
	corev1 "k8s.io/api/core/v1"

	"github.com/nicaffinity/nicaffinity/pkg/annotations"
	"github.com/nicaffinity/nicaffinity/pkg/nccllog"
	"github.com/nicaffinity/nicaffinity/pkg/nrt"
	podreq "github.com/nicaffinity/nicaffinity/pkg/request"
)

// Pod layers.
const (
	LayerPlacement   = "placement"
	LayerDevices     = "devices"
	LayerNetwork     = "network"
	LayerPermissions = "permissions"
	LayerNCCL        = "nccl"
)

// MultusNetworks is the annotation that attaches secondary networks
// (MacVLAN, SR-IOV) to a pod.
const MultusNetworks = "k8s.v1.cni.cncf.io/networks"

// PodState is what the pod checks read.
type PodState struct {
	Pod *corev1.Pod
	// NRT is the object of the pod's node (nil: none or not scheduled).
	NRT *v1alpha2.NodeResourceTopology
	// SchedulerName is nicaffinity's scheduler (nicaffinity-scheduler).
	SchedulerName string
	// NCCL is what NCCL said in each container's log (NCCL_DEBUG=INFO),
	// by container; nil when the logs were not read.
	NCCL map[string]nccllog.Report
}

// Pod runs the pod checklist.
func Pod(s PodState, o ClusterOptions) Report {
	p := s.Pod
	b := newBuilder("pod " + p.Namespace + "/" + p.Name)
	var observed *annotations.Observed
	if b.startLayer(LayerPlacement) {
		podPlacement(b, s, o)
	}
	if b.startLayer(LayerDevices) {
		observed = podDevices(b, s)
	}
	if b.startLayer(LayerNetwork) {
		podNetwork(b, s, observed)
	}
	if b.startLayer(LayerPermissions) {
		podPermissions(b, p, o)
	}
	// NCCL's own words are read whatever failed above: they help most
	// when something did.
	b.layer = LayerNCCL
	podNCCL(b, s, observed)
	return b.report()
}

// podPlacement checks where the pod is, what it asks for, who placed it and
// its plan.
func podPlacement(b *builder, s PodState, o ClusterOptions) {
	p := s.Pod
	switch {
	case p.Spec.NodeName == "":
		why := "Pending, not scheduled"
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse && c.Message != "" {
				why += ": " + c.Message
			}
		}
		b.fail("scheduled", why, "kubectl nicaffinity why "+p.Name+" (or kubectl describe pod): each node's reason says what is missing")
	default:
		b.pass("scheduled", "on "+p.Spec.NodeName)
	}
	// What the plugin reads of the pod, through the reader it uses.
	switch r, ok, err := podreq.Read(p, o.RequestConfig()); {
	case err != nil:
		b.fail("request", err.Error()+": the nicaffinity scheduler refuses the pod on every node", "fix the annotation (docs/scheduler.md)")
	case !ok:
		b.info("request", "no "+o.GPUResource+": nothing for nicaffinity to place")
	default:
		b.info("request", describeRequest(r))
	}
	if p.Spec.SchedulerName != s.SchedulerName {
		b.warn("scheduler", fmt.Sprintf("%q placed it, not %s: nothing chose its GPUs for their NICs", orDefault(p.Spec.SchedulerName, "default-scheduler"), s.SchedulerName),
			"set spec.schedulerName: "+s.SchedulerName)
	}
	if a, ok := p.Annotations[annotations.AllocationKey]; ok {
		plan, err := annotations.ParseAllocation(a)
		if err != nil {
			b.warn("plan", err.Error(), "")
		} else {
			b.info("plan", fmt.Sprintf("GPUs %s, NICs %s, level %s", strings.Join(plan.GPUs, ","), strings.Join(plan.NICs, ","), orDefault(plan.Level, "-")))
		}
	} else if p.Spec.SchedulerName == s.SchedulerName && p.Spec.NodeName != "" {
		b.info("plan", "none: the plugin left this pod alone (no GPU, or every GPU of the node)")
	}
}

// podDevices checks what the exporter observed the pod got, and returns it
// (nil when there is no observation to go by).
func podDevices(b *builder, s PodState) (observed *annotations.Observed) {
	p := s.Pod
	raw, ok := p.Annotations[annotations.ObservedKey]
	switch {
	case !ok:
		b.unknown("observed devices", "no "+annotations.ObservedKey+" annotation yet", "the exporter on "+p.Spec.NodeName+" writes it once the pod runs: check it is ready (nicaffinity doctor cluster)")
	default:
		obs, err := annotations.ParseObserved(raw)
		if err != nil {
			b.fail("observed devices", err.Error(), "")
			break
		}
		observed = &obs
		var pairs []string
		for _, g := range obs.GPUs {
			pairs = append(pairs, fmt.Sprintf("%s-%s %s", g.BusID, orDefault(g.NIC, "no NIC"), g.Level))
		}
		detail := fmt.Sprintf("worst %s (%s)", orDefault(obs.Level, "-"), strings.Join(pairs, ", "))
		switch {
		case len(obs.GPUDirect) > 0 && !obs.Aligned:
			b.fail("GPU-NIC alignment", detail+"; GPUDirect RDMA impossible: "+strings.Join(obs.GPUDirect, "; "), "nicaffinity doctor node on "+p.Spec.NodeName)
		case !obs.Aligned:
			b.fail("GPU-NIC alignment", detail+": not aligned, NCCL stages RDMA through host memory",
				"recreate the pod with schedulerName "+s.SchedulerName+" and policy required; if the plan was not followed, enable the allocation proxy (docs/allocation-proxy.md)")
		default:
			b.pass("GPU-NIC alignment", detail)
		}
		if obs.Plan == "differs" {
			b.warn("plan followed", "the node handed out other GPUs than the scheduler planned", "enable the allocation proxy on the node (docs/allocation-proxy.md)")
		}
	}
	return observed
}

// podNetwork checks NCCL's NIC list against the observed NICs, and the RoCE
// networking a pod needs.
func podNetwork(b *builder, s PodState, observed *annotations.Observed) {
	p := s.Pod
	if observed != nil && len(observed.NICs) > 0 {
		hca := strings.Join(observed.NICs, ",")
		set := envValue(p, "NCCL_IB_HCA")
		switch extra := prefixExtras(set, nodeNICs(s.NRT), observed.NICs); {
		case set != "" && !coversHCAs(set, observed.NICs):
			b.warn("NCCL_IB_HCA", fmt.Sprintf("the pod sets %q; its GPUs' nearest NICs are %s", set, hca), "set NCCL_IB_HCA=="+hca+" (or run the job under nicaffinity env)")
		case len(extra) > 0:
			b.warn("NCCL_IB_HCA", fmt.Sprintf("the pod sets %q, which NCCL reads as prefixes: it also selects %s", set, strings.Join(extra, ",")),
				"use the exact-match form, NCCL_IB_HCA=="+hca+" (what the allocation proxy sets)")
		default:
			b.info("NCCL_IB_HCA", hca)
		}
		roce := roceNICs(s.NRT, observed.NICs)
		switch {
		case len(roce) == 0:
		case p.Spec.HostNetwork:
			b.pass("RoCE networking", "hostNetwork: true")
		case p.Annotations[MultusNetworks] != "":
			b.pass("RoCE networking", "secondary network "+p.Annotations[MultusNetworks]+" (re-check the GID index inside the pod: show_gids | grep v2)")
		default:
			b.fail("RoCE networking", strings.Join(roce, ",")+" are RoCE (Ethernet) and the pod has neither hostNetwork nor a MacVLAN/SR-IOV network",
				"set hostNetwork: true, or attach a MacVLAN network with the "+MultusNetworks+" annotation")
		}
	} else {
		b.info("NCCL_IB_HCA", "no NIC observed for this pod")
	}
}

// podNCCL reports what NCCL itself said it used, from the containers'
// logs, against the plan and what the exporter observed: the answer to
// "GPU Direct RDMA Disabled" and to a silent fallback to sockets.
func podNCCL(b *builder, s PodState, observed *annotations.Observed) {
	if s.NCCL == nil {
		b.info("NCCL's own words", "the containers' logs were not read")
		return
	}
	said := 0
	for _, c := range slices.Sorted(maps.Keys(s.NCCL)) {
		r := s.NCCL[c]
		if r.Lines == 0 {
			continue
		}
		said++
		ncclContainer(b, c, r, observed)
	}
	if said == 0 {
		b.info("NCCL's own words", "no NCCL INFO lines in the containers' logs: run with NCCL_DEBUG=INFO to let doctor read which HCAs NCCL used and whether GPUDirect RDMA was on")
	}
}

// ncclContainer checks one container's NCCL report.
func ncclContainer(b *builder, c string, r nccllog.Report, observed *annotations.Observed) {
	name := "NCCL in " + c
	if r.Truncated {
		b.info(name, fmt.Sprintf("only the first %d MiB of the log were read", nccllog.MaxBytes>>20))
	}
	wantRDMA := observed != nil && len(observed.NICs) > 0
	switch {
	case r.Network == "Socket" && wantRDMA:
		b.fail(name, "NCCL uses sockets, not the RDMA NICs "+strings.Join(observed.NICs, ",")+" next to the pod's GPUs",
			"check the pod's RDMA devices and NCCL_IB_HCA (NCCL said: no IB device it could use)")
		return
	case len(r.HCAs) == 0:
		b.info(name, "NCCL named no RDMA device (network "+orDefault(r.Network, "not said")+")")
		return
	}
	var used, off []string
	for _, h := range r.HCAs {
		gdr := map[string]string{"on": "GPUDirect RDMA on", "off": "GPUDirect RDMA off", "": "GPUDirect RDMA not said"}[h.GDR]
		used = append(used, fmt.Sprintf("%s:%d (%s)", h.Name, h.Port, gdr))
		if h.GDR == "off" {
			off = append(off, h.Name)
		}
	}
	b.info(name+": HCAs", strings.Join(used, ", "))
	if wantRDMA {
		if extra := notIn(r.Names(), observed.NICs); len(extra) > 0 {
			b.warn(name+": HCAs against the plan", fmt.Sprintf("NCCL used %s; the pod's GPUs' nearest NICs are %s", strings.Join(extra, ","), strings.Join(observed.NICs, ",")),
				"set NCCL_IB_HCA=="+strings.Join(observed.NICs, ",")+" (what the allocation proxy sets)")
		} else {
			b.pass(name+": HCAs against the plan", "NCCL used only the NICs next to the pod's GPUs")
		}
	}
	switch {
	case len(off) > 0:
		b.warn(name+": GPUDirect RDMA", "NCCL says it is disabled for "+strings.Join(off, ","),
			"nicaffinity doctor node on the pod's node: nvidia-peermem or dma-buf, ACS, the level NCCL allows (NCCL_NET_GDR_LEVEL)")
	case r.ChannelsNoGDR > 0 && r.ChannelsGDR == 0:
		b.warn(name+": GPUDirect RDMA", fmt.Sprintf("%d channels over the network, none with GPUDirect RDMA", r.ChannelsNoGDR),
			"nicaffinity doctor node on the pod's node; NCCL_NET_GDR_LEVEL")
	case r.ChannelsGDR > 0:
		b.pass(name+": GPUDirect RDMA", fmt.Sprintf("on (%d channels over NET/IB with GDRDMA)", r.ChannelsGDR))
	}
}

// notIn are the names of have not in want.
func notIn(have, want []string) []string {
	var out []string
	for _, h := range have {
		if !slices.Contains(want, h) {
			out = append(out, h)
		}
	}
	return out
}

// podPermissions checks what RDMA needs of the containers that use devices.
func podPermissions(b *builder, p *corev1.Pod, o ClusterOptions) {
	for _, c := range p.Spec.Containers {
		if !usesDevices(c, o) {
			continue
		}
		if hasCap(c, "IPC_LOCK") {
			b.pass("container "+c.Name+": IPC_LOCK", "added")
		} else {
			b.fail("container "+c.Name+": IPC_LOCK", "not added: RDMA cannot pin (register) memory",
				`securityContext.capabilities.add: ["IPC_LOCK"]`)
		}
	}
	b.info("memlock", "not visible through the API: kubectl exec "+p.Name+" -- sh -c 'ulimit -l' should print unlimited")
}

// describeRequest says what a pod asks for, in words.
func describeRequest(r podreq.Request) string {
	d := fmt.Sprintf("%d GPUs", r.GPUs)
	if !r.RDMA {
		return d + ", no NIC"
	}
	policy := "required"
	switch {
	case !r.Required:
		policy = "preferred"
	case r.Wait > 0:
		policy = fmt.Sprintf("bounded: required for %s of waiting, then preferred", r.Wait)
	}
	d += fmt.Sprintf(", each with a NIC at %s or closer (%s)", r.MaxLevel, policy)
	for _, vf := range r.VFs {
		d += fmt.Sprintf(", %d VFs of %s", vf.Count, vf.Resource)
	}
	return d
}

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

func envValue(p *corev1.Pod, name string) string {
	for _, c := range p.Spec.Containers {
		for _, e := range c.Env {
			if e.Name == name {
				return e.Value
			}
		}
	}
	return ""
}

// coversHCAs: NCCL_IB_HCA is a list of device prefixes (optionally with
// :port, and = or ^ in front); every NIC must match one.
func coversHCAs(value string, nics []string) bool {
	if strings.HasPrefix(value, "^") {
		return false
	}
	var prefixes []string
	for _, e := range strings.Split(strings.TrimPrefix(value, "="), ",") {
		name, _, _ := strings.Cut(strings.TrimSpace(e), ":")
		prefixes = append(prefixes, name)
	}
	for _, n := range nics {
		if !slices.ContainsFunc(prefixes, func(p string) bool { return p != "" && strings.HasPrefix(n, p) }) {
			return false
		}
	}
	return true
}

// nodeNICs are the RDMA devices of the node's object.
func nodeNICs(obj *v1alpha2.NodeResourceTopology) []string {
	if obj == nil {
		return nil
	}
	var out []string
	for _, z := range obj.Zones {
		if z.Type == nrt.ZoneNIC {
			out = append(out, strings.TrimPrefix(z.Name, nrt.PrefixNIC))
		}
	}
	return out
}

// prefixExtras are the node's NICs a NCCL_IB_HCA value in the prefix form
// (no leading "=") selects besides the pod's own: "mlx5_1" also selects
// mlx5_10..mlx5_17.
func prefixExtras(value string, node, own []string) []string {
	if value == "" || strings.HasPrefix(value, "=") || strings.HasPrefix(value, "^") {
		return nil
	}
	var out []string
	for _, n := range node {
		if slices.Contains(own, n) {
			continue
		}
		for _, e := range strings.Split(value, ",") {
			name, _, _ := strings.Cut(strings.TrimSpace(e), ":")
			if name != "" && strings.HasPrefix(n, name) {
				out = append(out, n)
				break
			}
		}
	}
	return out
}

func roceNICs(obj *v1alpha2.NodeResourceTopology, nics []string) []string {
	if obj == nil {
		return nil
	}
	var out []string
	for _, z := range obj.Zones {
		if z.Type != nrt.ZoneNIC || !slices.Contains(nics, strings.TrimPrefix(z.Name, nrt.PrefixNIC)) {
			continue
		}
		for _, a := range z.Attributes {
			if a.Name == nrt.AttrLinkLayer && a.Value == "Ethernet" {
				out = append(out, strings.TrimPrefix(z.Name, nrt.PrefixNIC))
			}
		}
	}
	return out
}

func usesDevices(c corev1.Container, o ClusterOptions) bool {
	for res := range c.Resources.Limits {
		if string(res) == o.GPUResource || o.isNIC(res) {
			return true
		}
	}
	return false
}

func hasCap(c corev1.Container, name corev1.Capability) bool {
	if c.SecurityContext == nil || c.SecurityContext.Capabilities == nil {
		return false
	}
	return slices.Contains(c.SecurityContext.Capabilities.Add, name) || slices.Contains(c.SecurityContext.Capabilities.Add, "CAP_"+name)
}
