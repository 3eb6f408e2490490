package request

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nicaffinity/nicaffinity/pkg/annotations"
	"github.com/nicaffinity/nicaffinity/pkg/topology"
)

const sriov = "openshift.io/sriov_highnet"

// container requests the given resources ("name", "quantity", ...).
func container(res ...string) v1.Container {
	l := v1.ResourceList{}
	for i := 0; i+1 < len(res); i += 2 {
		l[v1.ResourceName(res[i])] = resource.MustParse(res[i+1])
	}
	return v1.Container{Name: "c", Resources: v1.ResourceRequirements{Limits: l, Requests: l}}
}

func pod(ann map[string]string, init []v1.Container, cs ...v1.Container) *v1.Pod {
	return &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Annotations: ann}, Spec: v1.PodSpec{InitContainers: init, Containers: cs}}
}

// TestRead: the request table every reader of pods shares.
func TestRead(t *testing.T) {
	always := v1.ContainerRestartPolicyAlways
	sidecar := container("nvidia.com/gpu", "1")
	sidecar.RestartPolicy = &always
	cfg := Default([]string{sriov, "openshift.io/sriov_net"})
	for _, tc := range []struct {
		name   string
		pod    *v1.Pod
		want   Request
		wantOK bool
		err    string
	}{
		{name: "no GPU", pod: pod(nil, nil, container("cpu", "1", "rdma/hca", "1"))},
		{name: "GPUs only", pod: pod(nil, nil, container("nvidia.com/gpu", "2")), wantOK: true,
			want: Request{GPUs: 2, MaxLevel: topology.LevelP2C, Required: true}},
		{name: "GPUs of two containers add up", pod: pod(nil, nil, container("nvidia.com/gpu", "2", "rdma/hca", "1"), container("nvidia.com/gpu", "1")), wantOK: true,
			want: Request{GPUs: 3, RDMA: true, MaxLevel: topology.LevelP2C, Required: true}},
		{name: "an init container's GPUs count as the scheduler counts them", pod: pod(nil, []v1.Container{container("nvidia.com/gpu", "4")}, container("nvidia.com/gpu", "1")), wantOK: true,
			want: Request{GPUs: 4, MaxLevel: topology.LevelP2C, Required: true}},
		{name: "a sidecar's GPUs add to the containers'", pod: pod(nil, []v1.Container{sidecar}, container("nvidia.com/gpu", "2")), wantOK: true,
			want: Request{GPUs: 3, MaxLevel: topology.LevelP2C, Required: true}},
		{name: "RDMA by annotation", pod: pod(map[string]string{annotations.RDMA: "true"}, nil, container("nvidia.com/gpu", "1")), wantOK: true,
			want: Request{GPUs: 1, RDMA: true, MaxLevel: topology.LevelP2C, Required: true}},
		{name: "VFs of two resources, sorted", pod: pod(nil, nil, container("nvidia.com/gpu", "2", sriov, "2", "openshift.io/sriov_net", "1")), wantOK: true,
			want: Request{GPUs: 2, RDMA: true, VFs: []VF{{"openshift.io/sriov_highnet", 2}, {"openshift.io/sriov_net", 1}}, MaxLevel: topology.LevelP2C, Required: true}},
		{name: "level and policy from annotations", pod: pod(map[string]string{annotations.MaxLevel: "NODE", annotations.Policy: "preferred"}, nil, container("nvidia.com/gpu", "1", "rdma/hca", "1")), wantOK: true,
			want: Request{GPUs: 1, RDMA: true, MaxLevel: topology.LevelNODE}},
		{name: "a bad level", pod: pod(map[string]string{annotations.MaxLevel: "CLOSE"}, nil, container("nvidia.com/gpu", "1")), err: "nicaffinity.io/max-level"},
		{name: "a bad policy", pod: pod(map[string]string{annotations.Policy: "always"}, nil, container("nvidia.com/gpu", "1")), err: "nicaffinity.io/policy"},
		{name: "policy required waits for ever", pod: pod(map[string]string{annotations.Policy: "required"}, nil, container("nvidia.com/gpu", "1", "rdma/hca", "1")), wantOK: true,
			want: Request{GPUs: 1, RDMA: true, MaxLevel: topology.LevelP2C, Required: true}},
		{name: "a wait of its own", pod: pod(map[string]string{annotations.Policy: "Bounded", annotations.AlignmentWait: "10m"}, nil, container("nvidia.com/gpu", "1", "rdma/hca", "1")), wantOK: true,
			want: Request{GPUs: 1, RDMA: true, MaxLevel: topology.LevelP2C, Required: true, Wait: 10 * time.Minute}},
		{name: "a wait makes a pod without a policy bounded", pod: pod(map[string]string{annotations.AlignmentWait: "1h"}, nil, container("nvidia.com/gpu", "1", "rdma/hca", "1")), wantOK: true,
			want: Request{GPUs: 1, RDMA: true, MaxLevel: topology.LevelP2C, Required: true, Wait: time.Hour}},
		{name: "a wait beside policy required", pod: pod(map[string]string{annotations.Policy: "required", annotations.AlignmentWait: "1h"}, nil, container("nvidia.com/gpu", "1")), err: "nicaffinity.io/alignment-wait"},
		{name: "a bad wait", pod: pod(map[string]string{annotations.AlignmentWait: "soon"}, nil, container("nvidia.com/gpu", "1")), err: "nicaffinity.io/alignment-wait"},
		{name: "another GPU resource is not ours", pod: pod(nil, nil, container("amd.com/gpu", "1"))},
		{name: "rails required", pod: pod(map[string]string{annotations.Rails: "Required"}, nil, container("nvidia.com/gpu", "1", "rdma/hca", "1")), wantOK: true,
			want: Request{GPUs: 1, RDMA: true, MaxLevel: topology.LevelP2C, Required: true, Rails: annotations.PolicyRequired}},
		{name: "rails ignored", pod: pod(map[string]string{annotations.Rails: "ignore"}, nil, container("nvidia.com/gpu", "1", "rdma/hca", "1")), wantOK: true,
			want: Request{GPUs: 1, RDMA: true, MaxLevel: topology.LevelP2C, Required: true, Rails: annotations.PolicyIgnore}},
		{name: "a bad rails policy", pod: pod(map[string]string{annotations.Rails: "spine"}, nil, container("nvidia.com/gpu", "1")), err: "nicaffinity.io/rails"},
		{name: "a job's RDMA pod follows rails, so it is not the common request", pod: jobPod(pod(nil, nil, container("nvidia.com/gpu", "2", "rdma/hca", "1"))), wantOK: true,
			want: Request{GPUs: 2, RDMA: true, MaxLevel: topology.LevelP2C, Required: true, Job: Job{Name: "train", Source: "batch.kubernetes.io/job-name"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.wantOK && tc.want.Rails == "" {
				tc.want.Rails = annotations.PolicyPreferred
			}
			if _, set := tc.pod.Annotations[annotations.Policy]; tc.wantOK && tc.want.Required && !set && tc.want.Wait == 0 {
				tc.want.Wait = cfg.AlignmentWait // the default policy, bounded
			}
			got, ok, err := Read(tc.pod, cfg)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("error %v, want one naming %s", err, tc.err)
				}
				return
			}
			if err != nil || ok != tc.wantOK {
				t.Fatalf("ok %v, err %v; want ok %v", ok, err, tc.wantOK)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("(-want,+got):\n%s", diff)
			}
			follows := got.RDMA && got.Job.Name != "" && got.Rails != annotations.PolicyIgnore
			if got.FollowsRails() != follows || got.Defaulted(cfg) != (ok && len(got.VFs) == 0 && got.MaxLevel == cfg.MaxLevel && got.Required == cfg.Required && got.Wait == cfg.defaultWait() && !follows) {
				t.Errorf("Defaulted = %v", got.Defaulted(cfg))
			}
		})
	}
}

// TestReadNCCLEnv: a pod's own NCCL environment moves its cut-off as NCCL
// reads it, and nothing NCCL would ignore does.
func TestReadNCCLEnv(t *testing.T) {
	cfg := Default(nil)
	env := func(kv ...string) []v1.EnvVar {
		var out []v1.EnvVar
		for i := 0; i+1 < len(kv); i += 2 {
			out = append(out, v1.EnvVar{Name: kv[i], Value: kv[i+1]})
		}
		return out
	}
	with := func(e []v1.EnvVar) v1.Container {
		c := container("nvidia.com/gpu", "1", "rdma/hca", "1")
		c.Env = e
		return c
	}
	fromSecret := v1.EnvVar{Name: EnvGDRLevel, ValueFrom: &v1.EnvVarSource{SecretKeyRef: &v1.SecretKeySelector{Key: "k"}}}
	tests := []struct {
		name  string
		pod   *v1.Pod
		level topology.Level
		nccl  string
	}{
		{"no env: the default", pod(nil, nil, with(nil)), topology.LevelP2C, ""},
		{"PHB includes NODE", pod(nil, nil, with(env(EnvGDRLevel, "PHB"))), topology.LevelNODE, "NCCL_NET_GDR_LEVEL=PHB"},
		{"old number 3 is PHB", pod(nil, nil, with(env(EnvGDRLevel, "3"))), topology.LevelNODE, "NCCL_NET_GDR_LEVEL=3"},
		{"PIX", pod(nil, nil, with(env(EnvGDRLevel, "PIX"))), topology.LevelPIX, "NCCL_NET_GDR_LEVEL=PIX"},
		{"PXN admits up to P2C", pod(nil, nil, with(env(EnvGDRLevel, "PXN"))), topology.LevelP2C, "NCCL_NET_GDR_LEVEL=PXN"},
		{"SYS", pod(nil, nil, with(env(EnvGDRLevel, "SYS"))), topology.LevelSYS, "NCCL_NET_GDR_LEVEL=SYS"},
		{"LOC turns GPUDirect RDMA off: any level", pod(nil, nil, with(env(EnvGDRLevel, "LOC"))), topology.LevelSYS, "NCCL_NET_GDR_LEVEL=LOC"},
		{"C2C off", pod(nil, nil, with(env(EnvGDRC2C, "0"))), topology.LevelPXB, "NCCL_NET_GDR_C2C=0"},
		{"C2C off, base-0 spelling", pod(nil, nil, with(env(EnvGDRC2C, "0x0"))), topology.LevelPXB, "NCCL_NET_GDR_C2C=0x0"},
		{"C2C on", pod(nil, nil, with(env(EnvGDRC2C, "1"))), topology.LevelP2C, ""},
		{"the level wins over C2C", pod(nil, nil, with(env(EnvGDRC2C, "0", EnvGDRLevel, "PHB"))), topology.LevelNODE, "NCCL_NET_GDR_LEVEL=PHB"},
		{"a level NCCL ignores, C2C still read", pod(nil, nil, with(env(EnvGDRLevel, "close", EnvGDRC2C, "0"))), topology.LevelPXB, "NCCL_NET_GDR_C2C=0"},
		{"lower case is not NCCL's", pod(nil, nil, with(env(EnvGDRLevel, "phb"))), topology.LevelP2C, ""},
		{"C2C garbage is ignored", pod(nil, nil, with(env(EnvGDRC2C, "off"))), topology.LevelP2C, ""},
		{"valueFrom is not visible", pod(nil, nil, with([]v1.EnvVar{fromSecret})), topology.LevelP2C, ""},
		{"a huge value is ignored", pod(nil, nil, with(env(EnvGDRLevel, strings.Repeat("P", 100)))), topology.LevelP2C, ""},
		{"the strictest container wins", pod(nil, nil, with(env(EnvGDRLevel, "PHB")), with(env(EnvGDRLevel, "PIX"))), topology.LevelPIX, "NCCL_NET_GDR_LEVEL=PIX"},
		{"init containers count", pod(nil, []v1.Container{with(env(EnvGDRLevel, "PXB"))}, with(nil)), topology.LevelPXB, "NCCL_NET_GDR_LEVEL=PXB"},
		{"env wins over the annotation", pod(map[string]string{annotations.MaxLevel: "PIX"}, nil, with(env(EnvGDRLevel, "SYS"))), topology.LevelSYS, "NCCL_NET_GDR_LEVEL=SYS"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r, ok, err := Read(tc.pod, cfg)
			if err != nil || !ok {
				t.Fatalf("Read = %v, %v", ok, err)
			}
			if r.MaxLevel != tc.level || r.NCCL != tc.nccl {
				t.Errorf("level %v from %q, want %v from %q", r.MaxLevel, r.NCCL, tc.level, tc.nccl)
			}
		})
	}
}

// TestJobOf: a pod's job is its PodGroup, else the first job label it
// carries (JobSet's with its replicated job), keyed by namespace; a name
// no apiserver would admit is refused, naming where it came from.
func TestJobOf(t *testing.T) {
	mk := func(ns string, labels map[string]string, group string) *v1.Pod {
		p := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "p", Labels: labels}}
		if group != "" {
			p.Spec.SchedulingGroup = &v1.PodSchedulingGroup{PodGroupName: &group}
		}
		return p
	}
	tests := []struct {
		name    string
		pod     *v1.Pod
		want    Job
		wantErr string
	}{
		{"a job of one", mk("a", nil, ""), Job{Namespace: "a"}, ""},
		{"a PodGroup", mk("a", map[string]string{"batch.kubernetes.io/job-name": "x"}, "train"), Job{"a", "train", JobFromPodGroup}, ""},
		{"JobSet with its replicated job", mk("a", map[string]string{JobSetLabel: "js", JobSetReplicatedJobLabel: "workers"}, ""),
			Job{"a", "js/workers", JobSetLabel}, ""},
		{"Kubeflow", mk("b", map[string]string{"training.kubeflow.org/job-name": "pt"}, ""), Job{"b", "pt", "training.kubeflow.org/job-name"}, ""},
		{"indexed Job", mk("b", map[string]string{"batch.kubernetes.io/job-name": "j"}, ""), Job{"b", "j", "batch.kubernetes.io/job-name"}, ""},
		{"the first label wins", mk("b", map[string]string{"volcano.sh/job-name": "v", "training.kubeflow.org/job-name": "pt"}, ""),
			Job{"b", "pt", "training.kubeflow.org/job-name"}, ""},
		{"a label not configured", mk("b", map[string]string{"example.com/job": "e"}, ""), Job{Namespace: "b"}, ""},
		{"a control character", mk("b", map[string]string{"volcano.sh/job-name": "v\n"}, ""), Job{}, "label volcano.sh/job-name"},
		{"a PodGroup name past the cap", mk("b", nil, strings.Repeat("g", 400)), Job{}, "spec.schedulingGroup.podGroupName"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := JobOf(tc.pod, DefaultJobLabels)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Errorf("error %v, want one naming %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("job (-want,+got):\n%s", diff)
			}
		})
	}
	// The same name in two namespaces is two jobs.
	a, _ := JobOf(mk("a", map[string]string{"volcano.sh/job-name": "v"}, ""), DefaultJobLabels)
	b, _ := JobOf(mk("b", map[string]string{"volcano.sh/job-name": "v"}, ""), DefaultJobLabels)
	if a.Key() == b.Key() {
		t.Errorf("jobs of two namespaces share the key %q", a.Key())
	}
}

// jobPod puts p in the indexed Job "train".
func jobPod(p *v1.Pod) *v1.Pod {
	p.Labels = map[string]string{"batch.kubernetes.io/job-name": "train"}
	return p
}

// maxErrLen bounds what Read's error may carry: a tenant writes the pod,
// and the error goes into the scheduler's status, Events and logs, so a
// 256 KiB annotation must not come back whole.
const maxErrLen = 512

// FuzzRead: whatever a tenant writes in a pod's annotations, job labels,
// PodGroup name, NCCL environment and GPU request, Read does not panic,
// answers the same twice, keeps its answer inside the request's domain,
// and names a refused input in a bounded message.
func FuzzRead(f *testing.F) {
	f.Add("PXB", "required", "preferred", "true", "train", "js", "workers", "PHB", "0", int64(2))
	f.Add("close", "always", "spine", "yes", "v\n", "", "", "LOC", "0x0", int64(1))
	f.Add(strings.Repeat("P", 300), strings.Repeat("r", 300), strings.Repeat("x", 300), "", strings.Repeat("g", 400), "a", "b", "9999999999999999999999", "-0", int64(1<<40))
	cfg := Default([]string{sriov})
	f.Fuzz(func(t *testing.T, level, policy, rails, rdma, group, jobset, replicated, ncclLevel, c2c string, gpus int64) {
		ann := map[string]string{}
		for k, v := range map[string]string{annotations.MaxLevel: level, annotations.Policy: policy, annotations.Rails: rails, annotations.RDMA: rdma} {
			if v != "" {
				ann[k] = v
			}
		}
		c := container("rdma/hca", "1")
		c.Resources.Limits["nvidia.com/gpu"] = *resource.NewQuantity(gpus, resource.DecimalSI)
		c.Resources.Requests["nvidia.com/gpu"] = *resource.NewQuantity(gpus, resource.DecimalSI)
		c.Env = []v1.EnvVar{{Name: EnvGDRLevel, Value: ncclLevel}, {Name: EnvGDRC2C, Value: c2c}}
		p := pod(ann, nil, c)
		p.Namespace = "ns"
		p.Labels = map[string]string{JobSetLabel: jobset, JobSetReplicatedJobLabel: replicated}
		if group != "" {
			p.Spec.SchedulingGroup = &v1.PodSchedulingGroup{PodGroupName: &group}
		}
		r, ok, err := Read(p, cfg)
		r2, ok2, err2 := Read(p, cfg)
		if ok != ok2 || (err == nil) != (err2 == nil) || !cmp.Equal(r, r2) {
			t.Fatalf("two reads differ: %+v %v %v, then %+v %v %v", r, ok, err, r2, ok2, err2)
		}
		if err != nil {
			if ok || len(err.Error()) > maxErrLen {
				t.Fatalf("ok %v with an error of %d bytes: %.200s", ok, len(err.Error()), err)
			}
			return
		}
		if !ok {
			if gpus > 0 {
				t.Fatalf("a pod asking for %d GPUs read as asking for none", gpus)
			}
			return
		}
		if int64(r.GPUs) != gpus || !r.RDMA {
			t.Fatalf("GPUs %d, RDMA %v; want %d and RDMA", r.GPUs, r.RDMA, gpus)
		}
		if r.MaxLevel < topology.LevelPIX || r.MaxLevel > topology.LevelSYS {
			t.Fatalf("level %v outside PIX..SYS", r.MaxLevel)
		}
		switch r.Rails {
		case annotations.PolicyRequired, annotations.PolicyPreferred, annotations.PolicyIgnore:
		default:
			t.Fatalf("rails %q", r.Rails)
		}
		if len(r.Job.Name) > maxJobName || strings.ContainsFunc(r.Job.Name, func(c rune) bool { return c < 0x20 || c == 0x7f }) {
			t.Fatalf("job name %.80q admitted", r.Job.Name)
		}
		if r.Job.Name != "" && r.Job.Namespace != "ns" {
			t.Fatalf("job %+v outside the pod's namespace", r.Job)
		}
		if len(r.NCCL) > len(EnvGDRLevel)+1+maxEnvValue {
			t.Fatalf("NCCL source of %d bytes", len(r.NCCL))
		}
	})
}
