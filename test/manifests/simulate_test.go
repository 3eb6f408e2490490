package manifests

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	batchv1 "k8s.io/api/batch/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/nicaffinity/nicaffinity/internal/controlplane"
)

// TestSimulateShardsJob: the sharded simulation's Indexed Job runs as
// many shares as it has completions, each pod its own (the index the
// Job's controller gives it), and passes a server-side dry-run apply.
func TestSimulateShardsJob(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(manifestsDir, "simulate", "shards.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	dec := decoder(t)
	var us []*unstructured.Unstructured
	var job *batchv1.Job
	for _, doc := range splitYAML(b) {
		obj, _, err := dec.Decode(doc, nil, nil)
		if err != nil {
			t.Fatalf("decoding %s: %v", firstLines(doc), err)
		}
		if j, ok := obj.(*batchv1.Job); ok {
			job = j
		}
		m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
		if err != nil {
			t.Fatal(err)
		}
		u := &unstructured.Unstructured{Object: m}
		u.SetNamespace("default")
		us = append(us, u)
	}
	if job == nil {
		t.Fatal("no Job")
	}
	if job.Spec.CompletionMode == nil || *job.Spec.CompletionMode != batchv1.IndexedCompletion || job.Spec.Completions == nil {
		t.Fatalf("the Job is not Indexed with a number of completions: %+v", job.Spec)
	}
	args := strings.Join(job.Spec.Template.Spec.Containers[0].Args, " ")
	if want := fmt.Sprintf(`--shard "${JOB_COMPLETION_INDEX}/%d"`, *job.Spec.Completions); !strings.Contains(args, want) {
		t.Errorf("the pods' command %q does not run share $JOB_COMPLETION_INDEX of the Job's %d completions (%s)", args, *job.Spec.Completions, want)
	}
	cp := controlplane.Start(t)
	dyn, mapper := dynamicClients(t, cp)
	dryRunApply(t, dyn, mapper, us)
}
