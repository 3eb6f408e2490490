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

// TestNoProductImportsTestPackages: fixtures and test helpers (packages
// named *test) are test code; no package of the product, the simulator or
// the tools imports one. The simulator's stand-ins are simulation code,
// named *sim, under internal/.
func TestNoProductImportsTestPackages(t *testing.T) {
	out, err := exec.Command("go", "list", "-f", "{{.ImportPath}} {{join .Imports \" \"}}", module+"/...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	checked := 0
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Fields(line)
		if len(f) == 0 || strings.HasPrefix(f[0], module+"/test/") || strings.HasSuffix(f[0], "test") {
			continue
		}
		checked++
		for _, imp := range f[1:] {
			if strings.HasPrefix(imp, module+"/") && strings.HasSuffix(imp, "test") {
				t.Errorf("%s imports the test package %s", f[0], imp)
			}
		}
	}
	if checked < 20 {
		t.Fatalf("only %d packages checked", checked)
	}
}
