package ncclxml_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nicaffinity/nicaffinity/pkg/topology/ncclxml"
)

func TestParseBadInput(t *testing.T) {
	var deep strings.Builder
	for i := 0; i < 70; i++ {
		fmt.Fprintf(&deep, `<pci busid="0000:%02x:00.0" class="0x060400">`, i)
	}
	deep.WriteString(strings.Repeat("</pci>", 70) + "</cpu></system>")
	tests := []struct {
		name, xml, wantErr string
	}{
		{"empty", "", "empty document"},
		{"truncated", `<system version="1"><cpu numaid="0"><pci busid="0000:01:00.0" class="0x030200">`, "XML syntax error on line 1: unexpected EOF"},
		{"wrong root", `<topology/>`, "root element is <topology>, want <system>"},
		{"bad numaid", `<system><cpu numaid="zero"/></system>`, `<cpu> #0: numaid "zero"`},
		{"bad affinity", `<system><cpu numaid="0" affinity="xyz"/></system>`, `<cpu> #0: affinity: cpumask "xyz"`},
		{"pci without busid", `<system><cpu numaid="0"><pci class="0x030200"/></cpu></system>`, "<pci> under cpu0 without a busid"},
		{"garbage busid", `<system><cpu numaid="0"><pci busid="here" class="0x030200"/></cpu></system>`, `<pci busid="here">: PCI address "here"`},
		{"garbage class", `<system><cpu numaid="0"><pci busid="0000:01:00.0" class="display"/></cpu></system>`, `<pci busid="0000:01:00.0">: class="display" is not a hex number`},
		{"bad gpu dev", `<system><cpu numaid="0"><pci busid="0000:01:00.0" class="0x030200"><gpu dev="-1"/></pci></cpu></system>`, `<gpu dev="-1"> is not a GPU number`},
		{"bad nvlink count", `<system><cpu numaid="0"><pci busid="0000:01:00.0" class="0x030200"><gpu dev="0"><nvlink target="0000:02:00.0" count="many"/></gpu></pci></cpu></system>`, "count is not a number"},
		{"bad c2c count", `<system><cpu numaid="0"><pci busid="0000:01:00.0" class="0x030200"><gpu dev="0"><c2c bw="44712" count="five"/></gpu></pci></cpu></system>`, `<c2c count="five"> is not a number`},
		{"negative c2c count", `<system><cpu numaid="0"><pci busid="0000:01:00.0" class="0x030200"><gpu dev="0"><c2c count="-1"/></gpu></pci></cpu></system>`, `<c2c count="-1"> is not a number`},
		{"bad net speed", `<system><cpu numaid="0"><pci busid="0000:01:00.0" class="0x020700"><nic><net name="mlx5_0" speed="fast"/></nic></pci></cpu></system>`, `<net name="mlx5_0"> speed "fast" is not a rate in Mb/s`},
		{"huge net speed", `<system><cpu numaid="0"><pci busid="0000:01:00.0" class="0x020700"><nic><net name="mlx5_0" speed="999999999999"/></nic></pci></cpu></system>`, `speed "999999999999" is not a rate in Mb/s`},
		{"net without name", `<system><cpu numaid="0"><pci busid="0000:01:00.0" class="0x020700"><nic><net dev="0"/></nic></pci></cpu></system>`, "<net> without a name"},
		{"device on two NUMA nodes", `<system><cpu numaid="0"><pci busid="0000:01:00.0" class="0x030200"/></cpu><cpu numaid="1"><pci busid="0000:01:00.0" class="0x030200"/></cpu></system>`, "PCI address 0000:01:00.0 already belongs to GPU"},
		{"bridge twice", `<system><cpu numaid="0"><pci busid="0000:01:00.0" class="0x060400"/><pci busid="0000:01:00.0" class="0x060400"/></cpu></system>`, "bridge listed twice"},
		{"nested too deep", `<system><cpu numaid="0">` + deep.String(), "nested deeper than 64"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ncclxml.Parse(strings.NewReader(tc.xml))
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("error = %v, want one containing %q", err, tc.wantErr)
			}
		})
	}
}

func FuzzParse(f *testing.F) {
	files, _ := filepath.Glob("../../profiles/nccl-xml/*.xml")
	for _, path := range files {
		b, err := os.ReadFile(path)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(string(b))
	}
	f.Add(`<system><cpu numaid="0"><pci busid="0000:01:00.0" class="0x030200"><gpu dev="0"><nvlink target="0000:01:00.0" count="2"/></gpu></pci></cpu></system>`)
	f.Fuzz(func(t *testing.T, doc string) {
		topo, err := ncclxml.Parse(strings.NewReader(doc))
		if err != nil {
			return
		}
		m := topo.Matrix()
		if len(m.Cells) != len(topo.GPUs)+len(topo.NICs) {
			t.Fatalf("matrix has %d rows for %d devices", len(m.Cells), len(topo.GPUs)+len(topo.NICs))
		}
	})
}
