// Package profiles embeds the real machine topologies the project ships: the
// NCCL topology XML dumps from public sources (each file's first line names
// its source), so the CLI and the simulator work with no host at hand.
package profiles

import (
	"embed"
	"fmt"
	"io/fs"
	"sort"
	"strings"

	"github.com/nicaffinity/nicaffinity/pkg/topology"
	"github.com/nicaffinity/nicaffinity/pkg/topology/ncclxml"
)

//go:embed nccl-xml/*.xml
var files embed.FS

// Default is the profile `make demo` shows: an OCI BM.GPU.H100.8, a real dump.
const Default = "oci-bm-gpu-h100-8-8gpu-8x2portcx7"

// Names lists the profiles: the XML file names up to the first '_' (the part
// before it names the machine, the rest the source).
func Names() []string {
	entries, _ := fs.ReadDir(files, "nccl-xml")
	var out []string
	for _, e := range entries {
		out = append(out, name(e.Name()))
	}
	sort.Strings(out)
	return out
}

func name(file string) string {
	n, _, _ := strings.Cut(strings.TrimSuffix(file, ".xml"), "_")
	return n
}

// Load imports the profile called name.
func Load(n string) (*topology.Topology, error) {
	entries, _ := fs.ReadDir(files, "nccl-xml")
	for _, e := range entries {
		if name(e.Name()) != n {
			continue
		}
		f, err := files.Open("nccl-xml/" + e.Name())
		if err != nil {
			return nil, err
		}
		defer f.Close()
		t, err := ncclxml.Parse(f)
		if err != nil {
			return nil, fmt.Errorf("profile %s: %w", n, err)
		}
		t.Source = "profile " + n
		return t, nil
	}
	return nil, fmt.Errorf("no profile %q; known: %s", n, strings.Join(Names(), ", "))
}
