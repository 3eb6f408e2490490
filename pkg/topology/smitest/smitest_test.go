package smitest

import (
	"strings"
	"testing"
)

const smallSMI = "\x1b[4m\tGPU0\tGPU1\tNIC0\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\x1b[0m\n" +
	"GPU0\t X \tNV4\tPIX\t0-7\t0\t\tN/A\n" +
	"GPU1\tNV4\t X \tSYS\t8-15\t1\t\tN/A\n" +
	"NIC0\tPIX\tSYS\t X \n\nLegend:\n\n  X    = Self\n\nNIC Legend:\n\n  NIC0: mlx5_0\n"

func TestParseSMIMatrix(t *testing.T) {
	m, err := ParseSMIMatrix(smallSMI)
	if err != nil {
		t.Fatal(err)
	}
	if got := m.Cells[0][2].String(); got != "PIX" {
		t.Errorf("GPU0-NIC0 = %s", got)
	}
	if m.Devices[1].CPUAffinity != "8-15" || m.Devices[1].NUMAAffinity != "1" || m.Devices[1].GPUNUMAID != "" {
		t.Errorf("GPU1 affinity = %+v", m.Devices[1])
	}
	if m.Devices[2].Name != "mlx5_0" {
		t.Errorf("NIC0 name = %q", m.Devices[2].Name)
	}
}

func TestParseSMIMatrixBadInput(t *testing.T) {
	tests := []struct {
		name, text, wantErr string
	}{
		{"empty", "", "no matrix header"},
		{"no header", "GPU is hot\n", "no matrix header"},
		{"short row", "\tGPU0\tGPU1\nGPU0\t X \nGPU1\tSYS\t X \n", "line 2: row GPU0 has 1 cells, want 2"},
		{"unknown level", "\tGPU0\tGPU1\nGPU0\t X \tFAST\nGPU1\tSYS\t X \n", `row GPU0 column GPU1: topology level "FAST"`},
		{"missing row", "\tGPU0\tGPU1\nGPU0\t X \tSYS\n", "row GPU1 is missing"},
		{"row twice", "\tGPU0\nGPU0\t X \nGPU0\t X \n", "row GPU0 appears twice"},
		{"unknown row", "\tGPU0\nGPU0\t X \nGPU9\t X \n", `row "GPU9" is not a column`},
		{"NIC without legend", "\tGPU0\tNIC0\nGPU0\t X \tPIX\nNIC0\tPIX\t X \n", "NIC0 has no entry in the NIC legend"},
		{"legend names unknown NIC", "\tGPU0\nGPU0\t X \nNIC Legend:\n  NIC4: mlx5_4\n", "NIC legend names NIC4"},
		{"bad header field", "\tGPU0\tFOO\n", `header field "FOO"`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseSMIMatrix(tc.text)
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("error = %v, want one containing %q", err, tc.wantErr)
			}
		})
	}
}

func FuzzParseSMIMatrix(f *testing.F) {
	f.Add(smallSMI)
	f.Add("\tGPU0\tNIC0\nGPU0\t X \tNV\nNIC0\tPIX\t X \nNIC Legend:\n NIC0:x\n")
	f.Fuzz(func(t *testing.T, text string) {
		m, err := ParseSMIMatrix(text)
		if err != nil {
			return
		}
		// What parses must print and parse back to the same cells.
		back, err := ParseSMIMatrix(m.Format())
		if err != nil {
			t.Fatalf("re-parsing our own output: %v\n%s", err, m.Format())
		}
		for i := range m.Cells {
			for j := range m.Cells[i] {
				if i != j && m.Cells[i][j] != back.Cells[i][j] {
					t.Fatalf("cell %d,%d: %v became %v", i, j, m.Cells[i][j], back.Cells[i][j])
				}
			}
		}
	})
}
