//go:build cluster

package cluster

import (
	"testing"
	"time"
)

// TestClusterInstall: the chart, installed by helm with the images built
// here, runs every pod Running and Ready on a real cluster.
func TestClusterInstall(t *testing.T) {
	e := startEnv(t)
	e.helm("install", "nicaffinity", chart(t), "--wait", "--timeout", "5m")
	_ = e
	_ = time.Second
}
