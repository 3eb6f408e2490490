//go:build cluster

package cluster

import (
	"testing"
)

// TestClusterInstall: the chart, installed by helm with the images built
// here, runs every pod Running and Ready on a real cluster.
func TestClusterInstall(t *testing.T) {
	e := startEnv(t)
	e.install()
}
