package scheme

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	kubeschedconfig "k8s.io/kubernetes/pkg/scheduler/apis/config"
	kubeschedscheme "k8s.io/kubernetes/pkg/scheduler/apis/config/scheme"

	"github.com/nicaffinity/nicaffinity/pkg/apis/config"
	podreq "github.com/nicaffinity/nicaffinity/pkg/request"
)

// defaults is what a profile without args gets, field by field.
func defaults() *config.NICAffinityArgs {
	return &config.NICAffinityArgs{
		GPUResourceName: "nvidia.com/gpu", RDMAResourcePrefixes: []string{"rdma/"}, SRIOVResourceNames: []string{"openshift.io/sriov_highnet"},
		DefaultMaxLevel: "P2C", DefaultPolicy: "bounded", MissingTopology: "Reject", StaleTopology: "Reserve",
		AlignmentWait: metav1.Duration{Duration: 30 * time.Minute}, ReservationTimeout: metav1.Duration{Duration: 2 * time.Minute}, TopologyMaxAge: metav1.Duration{Duration: 5 * time.Minute},
		AnnotateAt: "Bind", ScoringStrategy: config.ScoringStrategy{Type: "Balanced", LevelWeight: 3, CertaintyWeight: 2, PackingWeight: 1},
		JobLabels: podreq.DefaultJobLabels,
	}
}

// TestKubeSchedulerDecodesArgs: kube-scheduler's own configuration scheme
// decodes a profile's NICAffinity args strictly, defaults them and hands
// over the internal type.
func TestKubeSchedulerDecodesArgs(t *testing.T) {
	profile := func(args string) []byte {
		return []byte(`apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
profiles:
- schedulerName: nicaffinity-scheduler
  pluginConfig:
  - name: NICAffinity
    args:
` + args)
	}
	with := func(mutate func(*config.NICAffinityArgs)) *config.NICAffinityArgs {
		a := defaults()
		mutate(a)
		return a
	}
	for _, tc := range []struct {
		name    string
		args    string
		want    *config.NICAffinityArgs
		wantErr string
	}{
		{"empty", "      {}\n", defaults(), ""},
		{"some set", "      defaultMaxLevel: PXB\n      scoringStrategy: {type: MostAligned}\n      jobLabels: [team]\n",
			with(func(a *config.NICAffinityArgs) {
				a.DefaultMaxLevel, a.ScoringStrategy.Type, a.JobLabels = "PXB", "MostAligned", []string{"team"}
			}), ""},
		{"one weight set keeps the others 0", "      scoringStrategy: {packingWeight: 5}\n",
			with(func(a *config.NICAffinityArgs) {
				a.ScoringStrategy.LevelWeight, a.ScoringStrategy.CertaintyWeight, a.ScoringStrategy.PackingWeight = 0, 0, 5
			}), ""},
		{"topologyMaxAge 0 is off, not unset", "      topologyMaxAge: 0s\n",
			with(func(a *config.NICAffinityArgs) { a.TopologyMaxAge = metav1.Duration{} }), ""},
		{"misspelt field", "      defaultMaxLvl: PIX\n", nil, `unknown field "defaultMaxLvl"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			obj, _, err := kubeschedscheme.Codecs.UniversalDecoder().Decode(profile(tc.args), nil, nil)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			cfg := obj.(*kubeschedconfig.KubeSchedulerConfiguration)
			var got runtime.Object
			for _, pc := range cfg.Profiles[0].PluginConfig {
				if pc.Name == "NICAffinity" {
					got = pc.Args
				}
			}
			args, ok := got.(*config.NICAffinityArgs)
			if !ok {
				t.Fatalf("args are %T, want the internal type", got)
			}
			args.TypeMeta = metav1.TypeMeta{}
			if diff := cmp.Diff(tc.want, args); diff != "" {
				t.Errorf("args (-want,+got):\n%s", diff)
			}
		})
	}
}

// TestDecodeArgs: harnesses that hand the plugin runtime.Unknown (the
// scheduler framework without the registration, tests) get the same.
func TestDecodeArgs(t *testing.T) {
	if diff := cmp.Diff(defaults(), Defaulted()); diff != "" {
		t.Errorf("defaults (-want,+got):\n%s", diff)
	}
	got, err := DecodeArgs(&runtime.Unknown{Raw: []byte(`{"defaultPolicy":"preferred"}`), ContentType: runtime.ContentTypeJSON})
	want := defaults()
	want.DefaultPolicy = "preferred"
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("args (-want,+got):\n%s", diff)
	}
	if _, err := DecodeArgs(&runtime.Unknown{Raw: []byte(`{"defaultPolicy":"preferred","x":1}`)}); err == nil || !strings.Contains(err.Error(), `unknown field "x"`) {
		t.Errorf("err = %v, want the unknown field named", err)
	}
}
