// Package request reads what a pod asks nicaffinity for: how many GPUs,
// whether it needs a NIC (an RDMA resource, an SR-IOV VF resource, or the
// nicaffinity.io/rdma annotation), which VFs, the worst level it accepts
// and whether that is required. The scheduler plugin, `kubectl nicaffinity
// why` and `nicaffinity doctor` read pods only through Read, so they can
// never explain a pod differently from how the plugin judged it.
//
// Requests are summed as the scheduler sums them
// (k8s.io/component-helpers/resource.PodRequests: init containers,
// sidecars, pod-level resources and overhead included).
package request

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	v1 "k8s.io/api/core/v1"
	apiresource "k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/component-helpers/resource"

	"github.com/nicaffinity/nicaffinity/pkg/annotations"
	"github.com/nicaffinity/nicaffinity/pkg/apis/config"
	"github.com/nicaffinity/nicaffinity/pkg/topology"
)

// Config says how to read pods: the resource names and the defaults of the
// plugin's args.
type Config struct {
	// GPUResource is the GPU resource name (nvidia.com/gpu).
	GPUResource string
	// RDMAPrefixes are resource names or prefixes that mean the pod needs
	// a NIC (rdma/).
	RDMAPrefixes []string
	// SRIOVResources are VF resources: the pod needs a NIC and free VFs of
	// that resource on it.
	SRIOVResources []string
	// MaxLevel and Required apply when the pod sets no
	// nicaffinity.io/max-level or nicaffinity.io/policy.
	MaxLevel topology.Level
	Required bool
	// Bounded: the default policy is bounded (Required is then true): a
	// pod that sets no policy waits AlignmentWait for aligned GPUs.
	Bounded bool
	// AlignmentWait is how long a bounded pod waits for aligned GPUs
	// unless it says (nicaffinity.io/alignment-wait).
	AlignmentWait time.Duration
	// JobLabels name a pod's job, in order, when it names no PodGroup
	// (DefaultJobLabels).
	JobLabels []string
}

// Job labels of the training operators: a pod carrying one belongs to the
// job it names. JobSet's names the JobSet; the replicated job's name
// (JobSetReplicatedJobLabel) is added to it.
const (
	JobSetLabel              = "jobset.sigs.k8s.io/jobset-name"
	JobSetReplicatedJobLabel = "jobset.sigs.k8s.io/replicatedjob-name"
	// IndexedJobLabel names the Job of an indexed Job's pods.
	IndexedJobLabel = "batch.kubernetes.io/job-name"
)

// DefaultJobLabels are the plugin's default jobLabels: JobSet, Kubeflow
// training jobs, indexed Jobs, Volcano and coscheduling.
var DefaultJobLabels = []string{JobSetLabel, "training.kubeflow.org/job-name", IndexedJobLabel, "volcano.sh/job-name", "scheduling.x-k8s.io/pod-group"}

// Job is the job a pod belongs to. Jobs are keyed by namespace: a pod can
// never join another namespace's job.
type Job struct {
	Namespace string
	// Name is "" for a job of one (a pod naming no job).
	Name string
	// Source is JobFromPodGroup, or the label the name came from.
	Source string
}

// JobFromPodGroup: the pod's spec.schedulingGroup.podGroupName.
const JobFromPodGroup = "podGroup"

// Key is namespace/name, "" for a job of one.
func (j Job) Key() string {
	if j.Name == "" {
		return ""
	}
	return j.Namespace + "/" + j.Name
}

// maxJobName bounds a job's name: a PodGroup name (DNS subdomain), or a
// JobSet name and its replicated job's, each a label value.
const maxJobName = 253 + 1 + 63

// Default is the Config of the plugin's default args: nvidia.com/gpu,
// rdma/, the SR-IOV resources of the manifests, P2C (where NCCL's defaults
// use GPUDirect RDMA), required.
func Default(sriov []string) Config {
	return Config{GPUResource: config.DefaultGPUResourceName, RDMAPrefixes: config.DefaultRDMAResourcePrefixes(), SRIOVResources: sriov,
		MaxLevel: config.DefaultLevel(), Required: config.DefaultPolicy != annotations.PolicyPreferred,
		Bounded: config.DefaultPolicy == annotations.PolicyBounded, AlignmentWait: config.DefaultAlignmentWait, JobLabels: DefaultJobLabels}
}

// VF is a request for VFs of one SR-IOV resource.
type VF struct {
	Resource string
	Count    int64
}

// Request is what a pod asks for.
type Request struct {
	GPUs int
	RDMA bool
	// VFs are sorted by resource.
	VFs      []VF
	MaxLevel topology.Level
	Required bool
	// Wait is how long a bounded pod waits for aligned GPUs before it is
	// placed as a preferred one; 0 for every other pod. Required is true
	// while it waits.
	Wait time.Duration
	// Job is the pod's job (a job of one when it names none).
	Job Job
	// NCCL is the NCCL environment that set MaxLevel, as the pod spells it
	// ("NCCL_NET_GDR_LEVEL=PHB"); empty when none did.
	NCCL string
	// Rails is how the pod holds to its job's rails (nicaffinity.io/rails):
	// annotations.PolicyRequired, PolicyPreferred (the default) or
	// PolicyIgnore. It means nothing for a job of one.
	Rails string
}

// Defaulted reports whether the request takes the config's level and
// policy and asks for no VFs: the common request the plugin answers ahead.
func (r *Request) Defaulted(c Config) bool {
	return len(r.VFs) == 0 && r.MaxLevel == c.MaxLevel && r.Required == c.Required && r.Wait == c.defaultWait() && !r.FollowsRails()
}

// defaultWait is the wait of a pod that sets no policy.
func (c Config) defaultWait() time.Duration {
	if c.Bounded {
		return c.AlignmentWait
	}
	return 0
}

// FollowsRails reports whether the pod's placement depends on where its
// job's other pods are: it belongs to a multi-pod job, needs a NIC and does
// not ignore rails.
func (r *Request) FollowsRails() bool {
	return r.RDMA && r.Job.Name != "" && r.Rails != annotations.PolicyIgnore
}

// Read reads pod. ok is false for a pod that asks for no GPU (nothing for
// nicaffinity to do). The error names the bad annotation; the plugin
// refuses such a pod.
func Read(pod *v1.Pod, c Config) (r Request, ok bool, err error) {
	var buf [4]requested
	reqs := requests(pod, c, buf[:0])
	gpus := int64(0)
	for _, q := range reqs {
		if q.name == v1.ResourceName(c.GPUResource) {
			gpus = q.q.Value()
		}
	}
	if gpus <= 0 {
		return Request{}, false, nil
	}
	r = Request{GPUs: int(gpus), MaxLevel: c.MaxLevel, Required: c.Required, Wait: c.defaultWait()}
	for _, q := range reqs {
		if q.q.Value() <= 0 {
			continue
		}
		n := string(q.name)
		if slices.Contains(c.SRIOVResources, n) {
			r.RDMA = true
			r.VFs = append(r.VFs, VF{Resource: n, Count: q.q.Value()})
		}
		if c.rdma(n) {
			r.RDMA = true
		}
	}
	if RDMAAnnotated(pod) {
		r.RDMA = true
	}
	if r.MaxLevel, r.NCCL, err = MaxLevelOf(pod, c.MaxLevel); err != nil {
		return Request{}, false, err
	}
	if r.Job, err = JobOf(pod, c.JobLabels); err != nil {
		return Request{}, false, err
	}
	r.Rails = annotations.PolicyPreferred
	if s, ok := pod.Annotations[annotations.Rails]; ok {
		if r.Rails, err = annotations.ParseRails(s); err != nil {
			return Request{}, false, err
		}
	}
	if err := readPolicy(pod, c, &r); err != nil {
		return Request{}, false, err
	}
	// Map order is random; plans and signatures must not be.
	slices.SortFunc(r.VFs, func(a, b VF) int { return strings.Compare(a.Resource, b.Resource) })
	return r, true, nil
}

// readPolicy applies the pod's nicaffinity.io/policy and
// nicaffinity.io/alignment-wait to r.
func readPolicy(pod *v1.Pod, c Config, r *Request) error {
	s, hasPolicy := pod.Annotations[annotations.Policy]
	w, hasWait := pod.Annotations[annotations.AlignmentWait]
	p := ""
	if hasPolicy {
		var err error
		if p, err = annotations.ParsePolicy(s); err != nil {
			return err
		}
		r.Required, r.Wait = p != annotations.PolicyPreferred, 0
		if p == annotations.PolicyBounded {
			r.Wait = c.AlignmentWait
		}
	}
	if !hasWait {
		return nil
	}
	if hasPolicy && p != annotations.PolicyBounded {
		return fmt.Errorf("annotation %s is for policy %s, and %s=%q", annotations.AlignmentWait, annotations.PolicyBounded, annotations.Policy, s)
	}
	d, err := annotations.ParseAlignmentWait(w)
	if err != nil {
		return err
	}
	r.Required, r.Wait = true, d
	return nil
}

// RDMAAnnotated: the pod says it needs a NIC (nicaffinity.io/rdma: "true")
// whatever it requests.
func RDMAAnnotated(pod *v1.Pod) bool { return pod.Annotations[annotations.RDMA] == "true" }

// MaxLevelOf is the worst level the pod accepts: its own NCCL environment
// where it sets the cut-off (NCCL is what runs, so it wins; nccl names
// it), else its nicaffinity.io/max-level, else def. err is a bad
// annotation.
func MaxLevelOf(pod *v1.Pod, def topology.Level) (level topology.Level, nccl string, err error) {
	level = def
	if s, ok := pod.Annotations[annotations.MaxLevel]; ok {
		if level, err = annotations.ParseMaxLevel(s); err != nil {
			return def, "", err
		}
	}
	if l, src, ok := NCCLLevel(pod); ok {
		level, nccl = l, src
	}
	return level, nccl, nil
}

// requested is a pod's request of one resource.
type requested struct {
	name v1.ResourceName
	q    apiresource.Quantity
}

// rdma: name is an RDMA resource (it has one of the prefixes).
func (c Config) rdma(name string) bool {
	for _, p := range c.RDMAPrefixes {
		if strings.HasPrefix(name, p) {
			return true
		}
	}
	return false
}

// requests appends to out the pod's requests of the resources Read looks
// at (the GPU, SR-IOV and RDMA resources), summed as the scheduler sums
// them (resourcehelper.PodRequests). PreFilter reads every pod this way on
// the scheduling thread, so the common pod, whose requests are its
// containers' alone (no init containers, overhead or pod-level
// resources), is summed here without building the pod's whole resource
// list; any other pod goes through PodRequests itself.
// TestRequestsMatchPodRequests holds the two to the same sums.
func requests(pod *v1.Pod, c Config, out []requested) []requested {
	wanted := func(name v1.ResourceName) bool {
		n := string(name)
		return n == c.GPUResource || slices.Contains(c.SRIOVResources, n) || c.rdma(n)
	}
	if len(pod.Spec.InitContainers) > 0 || pod.Spec.Overhead != nil || resource.IsPodLevelRequestsSet(pod) {
		for name, q := range resource.PodRequests(pod, resource.PodResourcesOptions{}) {
			if wanted(name) {
				out = append(out, requested{name: name, q: q})
			}
		}
		return out
	}
	for i := range pod.Spec.Containers {
		for name, q := range pod.Spec.Containers[i].Resources.Requests {
			if !wanted(name) {
				continue
			}
			j := slices.IndexFunc(out, func(r requested) bool { return r.name == name })
			if j < 0 {
				out = append(out, requested{name: name})
				j = len(out) - 1
			}
			out[j].q.Add(q)
		}
	}
	return out
}

// NCCL's environment variables that move its GPUDirect RDMA cut-off
// (docs/levels.md, "Aligned: NCCL's rule").
const (
	EnvGDRLevel = "NCCL_NET_GDR_LEVEL"
	EnvGDRC2C   = "NCCL_NET_GDR_C2C"
)

// maxEnvValue bounds the values read: NCCL's own are a few bytes.
const maxEnvValue = 64

// NCCLLevel is the decision level a pod's own NCCL environment asks for,
// read from the literal env of its containers (init containers too; the
// strictest wins when they differ): NCCL_NET_GDR_LEVEL when NCCL reads it,
// else NCCL_NET_GDR_C2C=0 (PXB). A value NCCL would ignore is ignored.
// Values from envFrom, ConfigMaps or nccl.conf are not visible here.
func NCCLLevel(pod *v1.Pod) (topology.Level, string, bool) {
	best, src, found := topology.LevelSYS, "", false
	take := func(l topology.Level, s string) {
		if !found || l < best || l == best && s < src {
			best, src, found = l, s, true
		}
	}
	for _, cs := range [][]v1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
		for i := range cs {
			level, c2c, levelSrc, c2cSrc := "", "", "", ""
			for _, e := range cs[i].Env {
				if e.ValueFrom != nil || len(e.Value) > maxEnvValue {
					continue
				}
				switch e.Name {
				case EnvGDRLevel:
					level, levelSrc = e.Value, EnvGDRLevel+"="+e.Value
				case EnvGDRC2C:
					c2c, c2cSrc = e.Value, EnvGDRC2C+"="+e.Value
				}
			}
			if level == "" && c2c == "" {
				continue // the common container: nothing to parse (nor an error to make)
			}
			if p, err := topology.ParseNCCLLevel(level); level != "" && err == nil {
				take(levelOfNCCL(p), levelSrc)
			} else if off, ok := parseNCCLParam(c2c); ok && off {
				take(topology.LevelPXB, c2cSrc)
			}
		}
	}
	return best, src, found
}

// levelOfNCCL is the decision level that admits exactly the pairs NCCL's
// cut-off p does: NCCL's PHB includes nvidia-smi's NODE, and a cut-off
// below PIX (LOC, NVL, NVB, C2C) turns GPUDirect RDMA off on every NIC
// path, so no placement buys it and every level is as good.
func levelOfNCCL(p topology.NCCLPath) topology.Level {
	switch {
	case p < topology.PathPIX:
		return topology.LevelSYS
	case p == topology.PathPIX:
		return topology.LevelPIX
	case p == topology.PathPXB:
		return topology.LevelPXB
	case p <= topology.PathPXN:
		return topology.LevelP2C
	case p == topology.PathPHB:
		return topology.LevelNODE
	}
	return topology.LevelSYS
}

// parseNCCLParam reads an integer NCCL parameter as NCCL_PARAM does
// (strtoll, base 0); off is true for 0. ok is false where NCCL would keep
// its default.
func parseNCCLParam(s string) (off, ok bool) {
	if s == "" {
		return false, false
	}
	v, err := strconv.ParseInt(s, 0, 64)
	if err != nil {
		return false, false
	}
	return v == 0, true
}

// JobOf is the job a pod belongs to: its PodGroup, else the first of
// labels it carries, else a job of one. A name that no apiserver would
// have admitted (too long, control characters) is an error naming where it
// came from.
func JobOf(pod *v1.Pod, labels []string) (Job, error) {
	j := Job{Namespace: pod.Namespace}
	if g := pod.Spec.SchedulingGroup; g != nil && g.PodGroupName != nil && *g.PodGroupName != "" {
		j.Name, j.Source = *g.PodGroupName, JobFromPodGroup
	} else {
		for _, l := range labels {
			if v := pod.Labels[l]; v != "" {
				j.Name, j.Source = v, l
				if l == JobSetLabel && pod.Labels[JobSetReplicatedJobLabel] != "" {
					j.Name += "/" + pod.Labels[JobSetReplicatedJobLabel]
				}
				break
			}
		}
	}
	if len(j.Name) > maxJobName || strings.ContainsFunc(j.Name, func(r rune) bool { return r < 0x20 || r == 0x7f }) {
		where := "spec.schedulingGroup.podGroupName"
		if j.Source != JobFromPodGroup {
			where = "label " + j.Source
		}
		return Job{}, fmt.Errorf("%s: %.64q is not a job name (at most %d bytes, no control characters)", where, j.Name, maxJobName)
	}
	return j, nil
}
