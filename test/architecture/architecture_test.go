// Package architecture checks the shape of the module: which packages may
// link what.
package architecture

import (
	"os/exec"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/nicaffinity/nicaffinity"

// deps lists the packages pkg links, through the go command.
func deps(t *testing.T, pkg string) []string {
	t.Helper()
	out, err := exec.Command("go", "list", "-deps", module+"/"+pkg).Output()
	if err != nil {
		t.Fatalf("go list -deps %s: %v", pkg, err)
	}
	return strings.Fields(string(out))
}

// TestPluginLinksNoGRPC: the scheduler plugin reads objects through
// pkg/nrt, whose snapshot types live in pkg/devices; the kubelet's gRPC
// client (pkg/podresources) and gRPC itself stay out of the scheduler's
// plugin.
func TestPluginLinksNoGRPC(t *testing.T) {
	// The check must be able to see gRPC where it is linked.
	if !slices.Contains(deps(t, "pkg/exporter"), "google.golang.org/grpc") {
		t.Fatal("go list -deps does not show gRPC in pkg/exporter, which links it")
	}
	for _, d := range deps(t, "pkg/plugins/nicaffinity") {
		if strings.HasPrefix(d, "google.golang.org/grpc") || d == module+"/pkg/podresources" {
			t.Errorf("pkg/plugins/nicaffinity links %s", d)
		}
	}
}
