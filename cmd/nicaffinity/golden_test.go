package main

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/nicaffinity/nicaffinity/internal/golden"
)

// TestCLIGolden is the gate for refactors that must change nothing users
// see: `topo` (text and JSON) of every built-in machine and bundled
// profile, `topo --dra` and `dra claims` of every machine, each output
// against a file under testdata/golden. Run with -update only when a
// change is meant to change them, and say so in the commit.
func TestCLIGolden(t *testing.T) {
	list, err := runCLI(t, "topo", "--list-machines")
	if err != nil {
		t.Fatal(err)
	}
	var cases [][]string
	machines := strings.Split(machineNames(), ", ")
	sort.Strings(machines)
	for _, m := range machines {
		cases = append(cases, []string{"topo", "--machine", m}, []string{"topo", "--machine", m, "-o", "json"},
			[]string{"topo", "--dra", "--machine", m}, []string{"dra", "claims", "--machine", m})
	}
	for _, m := range strings.Fields(list) {
		if p, ok := strings.CutPrefix(m, "profile/"); ok {
			cases = append(cases, []string{"topo", "--profile", p})
		}
	}
	if err := os.MkdirAll("testdata/golden", 0o755); err != nil {
		t.Fatal(err)
	}
	for _, args := range cases {
		out, err := runCLI(t, args...)
		if err != nil {
			out += fmt.Sprintf("error: %v\n", err)
		}
		name := strings.NewReplacer("--", "", " ", "_", "/", "_").Replace(strings.Join(args, " ")) + ".txt"
		golden.Check(t, filepath.Join("testdata", "golden", name), []byte(out), *update)
	}
}
