package kubectlplugin

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/nicaffinity/nicaffinity/pkg/doctor"
	"github.com/nicaffinity/nicaffinity/pkg/plugins/nicaffinity"
)

// TestReadsPodsAsThePlugin: `kubectl nicaffinity why` and `doctor` read
// pods with the config of the plugin's default args (resource names,
// level, policy), through the same reader, so they judge every request of
// pkg/request's table as the plugin does.
func TestReadsPodsAsThePlugin(t *testing.T) {
	if diff := cmp.Diff(nicaffinity.RequestConfig(nicaffinity.DefaultArgs()), doctor.DefaultClusterOptions().RequestConfig()); diff != "" {
		t.Errorf("kubectl and doctor read pods unlike the plugin's defaults (-plugin,+kubectl):\n%s", diff)
	}
}
