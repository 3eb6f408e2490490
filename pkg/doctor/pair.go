package doctor

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"

	"github.com/k8stopologyawareschedwg/noderesourcetopology-api/pkg/apis/topology/v1alpha2"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/nicaffinity/nicaffinity/pkg/nrt"
)

// PassMark is the share of line rate a pair test must reach: what a bare
// metal pair reaches, since RDMA in a container adds almost nothing.
const PassMark = 0.9

// PairOptions describe a pair test between two nodes.
type PairOptions struct {
	NodeA, NodeB string
	Namespace    string
	// NIC is the RDMA device to test (mlx5_0); RateGbps its line rate.
	NIC      string
	RateGbps float64
	// RoCE selects the RoCE form: hostNetwork and a RoCE v2 GID index.
	RoCE     bool
	GIDIndex int
	// Image holds the perftest tools (ib_send_bw, ibv_devinfo, show_gids).
	Image string
	// RDMAResource is the resource the pods request (rdma/hca).
	RDMAResource string
}

var nameRE = regexp.MustCompile(`^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$`)
var nicRE = regexp.MustCompile(`^[A-Za-z0-9_.-]{1,64}$`)

// Validate names the first bad option.
func (o PairOptions) Validate() error {
	for _, n := range []struct{ flag, v string }{{"node A", o.NodeA}, {"node B", o.NodeB}, {"--namespace", o.Namespace}} {
		if !nameRE.MatchString(n.v) {
			return fmt.Errorf("%s %q is not a Kubernetes object name", n.flag, n.v)
		}
	}
	if o.NodeA == o.NodeB {
		return fmt.Errorf("nodes A and B are both %q: a pair test needs two nodes", o.NodeA)
	}
	if !nicRE.MatchString(o.NIC) {
		return fmt.Errorf("--nic %q is not an RDMA device name like mlx5_0", o.NIC)
	}
	if o.RateGbps <= 0 || o.RateGbps > 10000 {
		return fmt.Errorf("--rate-gbps %v: want the NIC's line rate in Gb/s (400 for NDR)", o.RateGbps)
	}
	if o.GIDIndex < 0 || o.GIDIndex > 255 {
		return fmt.Errorf("--gid-index %d: want 0 to 255", o.GIDIndex)
	}
	if o.Image == "" || o.RDMAResource == "" {
		return fmt.Errorf("--image and --rdma-resource must not be empty")
	}
	return nil
}

// NICFromObject picks the NIC and its line rate from a node's object: the
// first NIC zone that is ACTIVE. The rate attribute reads as the kernel
// writes it ("400 Gb/sec (4X NDR)").
func NICFromObject(obj *v1alpha2.NodeResourceTopology) (nic string, gbps float64, roce bool, err error) {
	for _, z := range obj.Zones {
		if z.Type != nrt.ZoneNIC {
			continue
		}
		attrs := map[string]string{}
		for _, a := range z.Attributes {
			attrs[a.Name] = a.Value
		}
		if s := attrs[nrt.AttrState]; s != "" && s != "ACTIVE" {
			continue
		}
		rate, _, _ := strings.Cut(attrs[nrt.AttrRate], " ")
		gbps, err := strconv.ParseFloat(rate, 64)
		if err != nil || gbps <= 0 {
			continue
		}
		return strings.TrimPrefix(z.Name, nrt.PrefixNIC), gbps, attrs[nrt.AttrLinkLayer] == "Ethernet", nil
	}
	return "", 0, false, fmt.Errorf("NodeResourceTopology %s has no ACTIVE NIC with a rate", obj.Name)
}

// Pair writes the four-step pair test: two pods pinned to the nodes, then
// the commands for devices, addresses and GIDs, the server and the client,
// with the pass mark.
func Pair(o PairOptions) (Report, error) {
	if err := o.Validate(); err != nil {
		return Report{}, err
	}
	server, client := "nicaffinity-pair-server", "nicaffinity-pair-client"
	var docs []string
	for _, p := range []struct{ name, node string }{{server, o.NodeA}, {client, o.NodeB}} {
		b, err := yaml.Marshal(pairPod(o, p.name, p.node))
		if err != nil {
			return Report{}, err
		}
		docs = append(docs, strings.Replace(string(b), "status: {}\n", "", 1))
	}
	ns := "-n " + o.Namespace
	gid := ""
	if o.RoCE {
		gid = fmt.Sprintf(" -x %d", o.GIDIndex)
	}
	bw := fmt.Sprintf("ib_send_bw%s -d %s -F --report_gbits", gid, o.NIC)
	mark := PassMark * o.RateGbps
	r := Report{Subject: fmt.Sprintf("pair test %s -> %s on %s (%g Gb/s)", o.NodeA, o.NodeB, o.NIC, o.RateGbps)}
	r.Steps = []Step{
		{Title: "Start two test pods (save as pair.yaml)", Text: strings.Join(docs, "---\n") + "\nkubectl apply -f pair.yaml\nkubectl " + ns + " wait --for=condition=Ready pod/" + server + " pod/" + client},
		{Title: "Devices visible", Text: fmt.Sprintf("kubectl %s exec %s -- ibv_devinfo -d %s | grep -E 'hca_id|state|link_layer'\nwant: state PORT_ACTIVE", ns, server, o.NIC)},
		{Title: "Addresses and GIDs", Text: fmt.Sprintf("kubectl %s exec %s -- ip -brief addr\nkubectl %s exec %s -- show_gids | grep v2", ns, server, ns, server) +
			map[bool]string{true: fmt.Sprintf("\nwant: a RoCE v2 GID on %s at index %d (else pass the index show_gids prints with --gid-index)", o.NIC, o.GIDIndex), false: ""}[o.RoCE]},
		{Title: "Server", Text: fmt.Sprintf("kubectl %s exec -it %s -- %s", ns, server, bw)},
		{Title: "Client", Text: fmt.Sprintf("SERVER_IP=$(kubectl %s get pod %s -o jsonpath='{.status.podIP}')\nkubectl %s exec -it %s -- %s $SERVER_IP\npass: BW average at least %.0f Gb/s (%.0f%% of %g Gb/s line rate); lower is configuration, not the container", ns, server, ns, client, bw, mark, PassMark*100, o.RateGbps)},
		{Title: "Clean up (the pods hold " + o.RDMAResource + ")", Text: "kubectl delete -f pair.yaml"},
	}
	return r, nil
}

func pairPod(o PairOptions, name, node string) *corev1.Pod {
	limits := corev1.ResourceList{corev1.ResourceName(o.RDMAResource): resource.MustParse("1")}
	return &corev1.Pod{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: o.Namespace, Labels: map[string]string{"app.kubernetes.io/name": "nicaffinity-pair-test"}},
		Spec: corev1.PodSpec{
			NodeSelector:  map[string]string{"kubernetes.io/hostname": node},
			HostNetwork:   o.RoCE,
			RestartPolicy: corev1.RestartPolicyNever,
			Containers: []corev1.Container{{
				Name: "perftest", Image: o.Image, Command: []string{"sleep", "infinity"},
				Resources:       corev1.ResourceRequirements{Limits: limits, Requests: limits},
				SecurityContext: &corev1.SecurityContext{Capabilities: &corev1.Capabilities{Add: []corev1.Capability{"IPC_LOCK"}}},
			}},
		},
	}
}
