// Package architecture checks the shape of the module: which packages may
// link what.
package architecture

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
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

// longFunctionExceptions are the functions allowed past maxFunctionLines,
// with why.
var longFunctionExceptions = map[string]string{}

const maxFunctionLines = 100

// TestNoLongFunctions: no function of the product, the simulator or the
// tools (pkg/, cmd/, internal/; test files and test packages aside) is
// longer than maxFunctionLines, except the listed ones: long functions are
// split along their seams, each piece named and tested.
func TestNoLongFunctions(t *testing.T) {
	fset := token.NewFileSet()
	seen := 0
	err := productGoFiles([]string{"pkg", "cmd", "internal"}, func(path string) error {
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(filepath.Join("..", ".."), path)
		for _, decl := range f.Decls {
			fn, ok := decl.(*ast.FuncDecl)
			if !ok || fn.Body == nil {
				continue
			}
			seen++
			lines := fset.Position(fn.End()).Line - fset.Position(fn.Pos()).Line + 1
			key := filepath.ToSlash(rel) + " " + fn.Name.Name
			if _, ok := longFunctionExceptions[key]; lines > maxFunctionLines && !ok {
				t.Errorf("%s is %d lines, at most %d", key, lines, maxFunctionLines)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if seen < 500 {
		t.Fatalf("only %d functions read", seen)
	}
}

// productGoFiles calls f for every product Go file under roots (pkg/,
// cmd/, internal/ ...): test files, test packages and testdata aside.
func productGoFiles(roots []string, f func(path string) error) error {
	for _, root := range roots {
		err := filepath.WalkDir(filepath.Join("..", "..", root), func(path string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if d.IsDir() && strings.HasSuffix(d.Name(), "test") || d.Name() == "testdata" {
				return filepath.SkipDir
			}
			if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
				return nil
			}
			return f(path)
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// TestNoRecoveredFailures: the simulator and the programs never recover a
// panic. The harness they run on (control plane, simulated cluster,
// scheduler) returns errors; tests wrap those in t.Fatal. A fake
// testing.TB whose Fatal panics, recovered on one goroutine, lost every
// failure on any other.
func TestNoRecoveredFailures(t *testing.T) {
	fset := token.NewFileSet()
	for _, root := range []string{"cmd", "internal"} {
		err := filepath.WalkDir(filepath.Join("..", "..", root), func(path string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
				return err
			}
			f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
			if err != nil {
				return err
			}
			ast.Inspect(f, func(n ast.Node) bool {
				if c, ok := n.(*ast.CallExpr); ok {
					if id, ok := c.Fun.(*ast.Ident); ok && id.Name == "recover" {
						t.Errorf("%s: recover()", fset.Position(c.Pos()))
					}
				}
				return true
			})
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	if _, err := os.Stat(filepath.Join("..", "..", "internal", "runenv")); err == nil {
		t.Errorf("internal/runenv is back: the harness returns errors instead")
	}
}

// TestProxyLinksNoKubernetes: the allocation proxy runs on every GPU node;
// it links client-go and the kubelet's APIs, never k8s.io/kubernetes (a
// library in name only, and most of the binary).
func TestProxyLinksNoKubernetes(t *testing.T) {
	if !slices.ContainsFunc(deps(t, "cmd/scheduler"), func(d string) bool { return strings.HasPrefix(d, "k8s.io/kubernetes/") }) {
		t.Fatal("go list -deps does not show k8s.io/kubernetes in cmd/scheduler, which links it")
	}
	for _, d := range deps(t, "cmd/allocation-proxy") {
		if strings.HasPrefix(d, "k8s.io/kubernetes/") {
			t.Errorf("cmd/allocation-proxy links %s", d)
		}
	}
}

// TestTopologyCoreImportsOnlyItself: pkg/topology and its subpackages (the
// readers and their test helpers) are the bottom layer; an import of any
// other package of the module from there is an arrow upward.
func TestTopologyCoreImportsOnlyItself(t *testing.T) {
	out, err := exec.Command("go", "list", "-f", "{{.ImportPath}} {{join .Imports \" \"}}", module+"/pkg/topology/...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	core := module + "/pkg/topology"
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if len(lines) < 5 {
		t.Fatalf("only %d packages under pkg/topology", len(lines))
	}
	for _, line := range lines {
		f := strings.Fields(line)
		for _, imp := range f[1:] {
			if strings.HasPrefix(imp, module+"/") && imp != core && !strings.HasPrefix(imp, core+"/") {
				t.Errorf("%s imports %s, above it", f[0], imp)
			}
		}
	}
}

// TestPlacementIsPure: pkg/placement decides from its arguments alone: no
// informers or clients, no scheduler framework, no metrics. (No clock
// either: it imports no package that reads one, which the list below
// would show; time is not imported at all.)
func TestPlacementIsPure(t *testing.T) {
	d := deps(t, "pkg/placement")
	if !slices.Contains(d, module+"/pkg/nrt") {
		t.Fatal("go list -deps does not show pkg/nrt in pkg/placement, which links it")
	}
	for _, p := range d {
		for _, banned := range []string{"k8s.io/client-go/", "k8s.io/kube-scheduler/", "k8s.io/kubernetes/", "github.com/prometheus/", "google.golang.org/grpc", "time"} {
			if p == banned || strings.HasPrefix(p, banned) && strings.HasSuffix(banned, "/") {
				if banned == "time" && !directImport(t, "pkg/placement", "time") {
					continue
				}
				t.Errorf("pkg/placement links %s", p)
			}
		}
	}
}

// directImport says whether a package of the module imports imp itself.
func directImport(t *testing.T, pkg, imp string) bool {
	out, err := exec.Command("go", "list", "-f", "{{join .Imports \" \"}}", module+"/"+pkg).Output()
	if err != nil {
		t.Fatalf("go list %s: %v", pkg, err)
	}
	return slices.Contains(strings.Fields(string(out)), imp)
}

// maxDatesPerPage: a page of docs/ says what is true now, each current
// figure once in a table row with its date; more dates than this is a run
// log, which belongs in commit messages and measurements/.
const maxDatesPerPage = 6

// date is a date in prose (not part of a record's name, such as
// measurements/demo-2026-12-07).
var date = regexp.MustCompile(`(^|[^-\w/])20\d\d-\d\d-\d\d`)

// measurementRef is a reference to a record.
var measurementRef = regexp.MustCompile(`measurements/[A-Za-z0-9._-]+`)

// TestDocsAreReference: no page of docs/ is a run log, every record the
// docs and the README cite exists, and measurements/README.md indexes
// every record.
func TestDocsAreReference(t *testing.T) {
	pages, err := filepath.Glob("../../docs/*.md")
	if err != nil || len(pages) < 10 {
		t.Fatalf("docs pages: %v %v", pages, err)
	}
	sub, _ := filepath.Glob("../../docs/*/*.md")
	for _, p := range append(append(pages, sub...), "../../README.md") {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		if n := len(date.FindAll(b, -1)); n > maxDatesPerPage {
			t.Errorf("%s has %d dates: a run log? (at most %d; keep records in measurements/)", p, n, maxDatesPerPage)
		}
		for _, ref := range measurementRef.FindAll(b, -1) {
			name := strings.TrimRight(string(ref), ".")
			if _, err := os.Stat(filepath.Join("../..", name)); err != nil {
				t.Errorf("%s cites %s, which does not exist", p, name)
			}
		}
	}
	index, err := os.ReadFile("../../measurements/README.md")
	if err != nil {
		t.Fatal(err)
	}
	entries, err := os.ReadDir("../../measurements")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if e.Name() != "README.md" && !strings.Contains(string(index), "("+e.Name()) {
			t.Errorf("measurements/README.md does not index %s", e.Name())
		}
	}
}

// TestPkgWritesNoTempFiles: no product package under pkg/ makes temporary
// files or directories: host data and the catalogue's machines are read
// where they are (the catalogue's sysfs trees are built in memory), so a
// product never leaves files behind or depends on a writable /tmp.
func TestPkgWritesNoTempFiles(t *testing.T) {
	seen := 0
	err := productGoFiles([]string{"pkg"}, func(path string) error {
		seen++
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, call := range []string{"os.MkdirTemp(", "os.CreateTemp("} {
			if strings.Contains(string(b), call) {
				t.Errorf("%s calls %s", path, call)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if seen < 100 {
		t.Fatalf("only %d files read", seen)
	}
}
