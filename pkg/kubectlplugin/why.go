package kubectlplugin

import (
	"context"
	"fmt"
	"strings"
	"text/tabwriter"

	"github.com/k8stopologyawareschedwg/noderesourcetopology-api/pkg/apis/topology/v1alpha2"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"

	"github.com/nicaffinity/nicaffinity/pkg/doctor"
	"github.com/nicaffinity/nicaffinity/pkg/nrt"
	"github.com/nicaffinity/nicaffinity/pkg/placement"
	podreq "github.com/nicaffinity/nicaffinity/pkg/request"
)

// nrtResource is the NodeResourceTopology API.
var nrtResource = v1alpha2.SchemeGroupVersion.WithResource("noderesourcetopologies")

// maxNodes bounds the per-node table of a Pending pod.
const maxNodes = 200

// Why explains a pod: for a Pending pod the scheduler's last word and,
// per node, what its object offers the pod; for a placed pod its plan
// against what it got, and the NICs to use.
func Why(ctx context.Context, c doctor.Clients, namespace, name string, o doctor.ClusterOptions, schedulerName string) (string, error) {
	s, err := doctor.GatherPod(ctx, c, namespace, name, schedulerName)
	if err != nil {
		return "", err
	}
	p := s.Pod
	if p.Spec.NodeName != "" {
		return whyPlaced(s, o), nil
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%s/%s is Pending.\n", namespace, name)
	events, err := c.Kube.CoreV1().Events(namespace).List(ctx, metav1.ListOptions{FieldSelector: fields.SelectorFromSet(fields.Set{"involvedObject.name": name}).String()})
	if err != nil {
		return "", fmt.Errorf("events of %s/%s: %w", namespace, name, err)
	}
	var last *corev1.Event
	for i := range events.Items {
		e := &events.Items[i]
		if e.Reason == "FailedScheduling" && (last == nil || e.LastTimestamp.After(last.LastTimestamp.Time) || e.EventTime.After(last.EventTime.Time)) {
			last = e
		}
	}
	if last != nil {
		fmt.Fprintf(&b, "The scheduler (%s) said: %s\n", orDefault(p.Spec.SchedulerName, "default-scheduler"), last.Message)
	} else {
		b.WriteString("No FailedScheduling event yet.\n")
	}
	r, ok, err := podreq.Read(p, o.RequestConfig())
	if err != nil {
		fmt.Fprintf(&b, "Its annotations cannot be read (%v): the nicaffinity scheduler refuses it on every node until they are fixed.\n", err)
		return b.String(), nil
	}
	if !ok {
		b.WriteString("It asks for no GPU: nicaffinity has nothing to say about it.\n")
		return b.String(), nil
	}
	gpus, rdma, level := r.GPUs, r.RDMA, r.MaxLevel
	req := placement.FromPod(r, o.RequestConfig())
	list, err := c.Dynamic.Resource(nrtResource).List(ctx, metav1.ListOptions{Limit: maxNodes})
	if err != nil {
		return "", fmt.Errorf("listing NodeResourceTopologies: %w", err)
	}
	need := "a GPU"
	if rdma {
		need = "a NIC at " + level.String() + " or closer"
	}
	for _, vf := range r.VFs {
		need += fmt.Sprintf(" (and %d VFs of %s on those NICs)", vf.Count, vf.Resource)
	}
	switch {
	case rdma && !r.Required:
		need += "; policy preferred: nodes without are only scored lower"
	case rdma && r.Wait > 0:
		need += fmt.Sprintf("; policy bounded: once it has waited %s for them, nodes without are only scored lower", r.Wait)
	}
	fmt.Fprintf(&b, "\nIt asks for %d GPUs, each with %s. What each node's object offers:\n\n", gpus, need)
	w := tabwriter.NewWriter(&b, 0, 4, 2, ' ', 0)
	fmt.Fprintf(w, "NODE\tFREE GPUS\tWITH A NIC AT %s\tNOTE\n", level)
	li := placement.LevelIndex(level)
	rows := 0
	for i := range list.Items {
		obj, err := nrt.Decode(&list.Items[i])
		var comp *nrt.Compiled
		if err == nil {
			comp, err = nrt.Compile(obj, o.GPUResource)
		}
		if err != nil {
			fmt.Fprintf(w, "%s\t-\t-\tcannot be used: %s\n", list.Items[i].GetName(), err)
			rows++
			continue
		}
		free, near := comp.Free.Count(), (comp.Free & comp.AnyNear[li]).Count()
		fmt.Fprintf(w, "%s\t%d\t%d\t%s\n", obj.Name, free, near, nodeNote(comp, &req))
		rows++
	}
	w.Flush()
	if rows == 0 {
		b.WriteString("(no NodeResourceTopology objects: is the exporter running? nicaffinity doctor cluster)\n")
	}
	return b.String(), nil
}

// whyPlaced explains a placed pod: its plan against what it got (doctor's
// pod checks), and the NICs to use.
func whyPlaced(s doctor.PodState, o doctor.ClusterOptions) string {
	var b strings.Builder
	p := s.Pod
	fmt.Fprintf(&b, "%s/%s runs on %s.\n", p.Namespace, p.Name, p.Spec.NodeName)
	r := doctor.Pod(s, o)
	for _, ch := range r.Checks {
		if ch.Layer == doctor.LayerPermissions || ch.Status == doctor.Skipped {
			continue
		}
		fmt.Fprintf(&b, "  %s: %s\n", ch.Name, ch.Detail)
		if ch.Fix != "" && (ch.Status == doctor.Fail || ch.Status == doctor.Warn) {
			fmt.Fprintf(&b, "    fix: %s\n", ch.Fix)
		}
	}
	return b.String()
}

// NodeVerdict is what the placement core decides for req on a node as its
// object shows it: the scheduler's Filter on that node, less what only the
// scheduler knows (its reservations not yet in the object, the job's
// rails as its store holds them).
func NodeVerdict(comp *nrt.Compiled, req *placement.Request) placement.Verdict {
	n := placement.NodeOf(comp)
	steps := placement.MaxCallSteps
	return placement.Fit(&n, req, &steps)
}

// nodeNote is a node's NOTE column: the verdict in the scheduler's words.
func nodeNote(comp *nrt.Compiled, req *placement.Request) string {
	v := NodeVerdict(comp, req)
	switch {
	case v.Fits:
		return "fits by its object (CPU, memory or other plugins may still refuse it)"
	case comp.HostBlock != "":
		return "GPUDirect RDMA cannot run: " + comp.HostBlock
	}
	return v.Message
}

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}
