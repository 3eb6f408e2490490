package realkubelet

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// TestConfigYAML: the configuration keeps enforceNodeAllocatable as an
// empty list (omitted, the kubelet defaults it to "pods", which needs QoS
// cgroups and fails validation with cgroupsPerQOS off), and the static CPU
// policy reserves a CPU.
func TestConfigYAML(t *testing.T) {
	k := &Kubelet{base: "/tmp/rk0", opts: Options{CPUManagerPolicy: "static"}}
	b, err := ConfigYAML(k.config(10250, 10248))
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := yaml.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	if v, ok := doc["enforceNodeAllocatable"].([]any); !ok || len(v) != 0 {
		t.Errorf("enforceNodeAllocatable = %#v, want []", doc["enforceNodeAllocatable"])
	}
	for key, want := range map[string]any{"cgroupsPerQOS": false, "failCgroupV1": false, "reservedSystemCPUs": "0", "cpuManagerPolicy": "static",
		"containerRuntimeEndpoint": "unix:///tmp/rk0/cri.sock", "readOnlyPort": nil, "port": float64(10250)} {
		if got := doc[key]; got != want {
			t.Errorf("%s = %#v, want %#v", key, got, want)
		}
	}
}

// TestBinaryErrors: a missing or unusable $NICAFFINITY_KUBELET says what
// to run.
func TestBinaryErrors(t *testing.T) {
	dir := t.TempDir()
	notExec := filepath.Join(dir, "kubelet")
	if err := os.WriteFile(notExec, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ value, want string }{
		{"", "make test-kubelet"},
		{filepath.Join(dir, "none"), "not an executable kubelet"},
		{notExec, "not an executable kubelet"},
		{dir, "not an executable kubelet"},
	} {
		t.Setenv(BinaryEnv, tc.value)
		if _, err := Binary(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s=%q: %v, want an error saying %q", BinaryEnv, tc.value, err, tc.want)
		}
	}
}
