// Package smitest reads the text `nvidia-smi topo -m` prints back into a
// topology.Matrix: for the tests that hold the level rule to published
// matrices. The product prints matrices (topology.Matrix.Format); it never
// parses them.
package smitest

import (
	"bufio"
	"fmt"
	"regexp"
	"strings"

	"github.com/nicaffinity/nicaffinity/pkg/topology"
)

var ansiEscape = regexp.MustCompile(`\x1b\[[0-9;]*[A-Za-z]`)

// ParseSMIMatrix reads the text `nvidia-smi topo -m` prints (tabs or spaces,
// with or without a prompt line before it) back into a topology.Matrix. NIC names come
// from the NIC legend. Errors name the line.
func ParseSMIMatrix(text string) (*topology.Matrix, error) {
	// nvidia-smi underlines the header on a terminal.
	text = ansiEscape.ReplaceAllString(text, "")
	sc := bufio.NewScanner(strings.NewReader(text))
	sc.Buffer(make([]byte, 0, 64*1024), 1024*1024)
	var labels []string
	m := &topology.Matrix{}
	lineNo := 0
	rows := map[string]int{}
	inLegend, afterRows := false, false
	for sc.Scan() {
		lineNo++
		line := sc.Text()
		fields := strings.Fields(line)
		if len(fields) == 0 {
			continue
		}
		switch {
		case labels == nil:
			if fields[0] != "GPU0" && fields[0] != "NIC0" {
				continue
			}
			for _, f := range fields {
				if f == "CPU" {
					break
				}
				if !strings.HasPrefix(f, "GPU") && !strings.HasPrefix(f, "NIC") {
					return nil, fmt.Errorf("line %d: header field %q is neither GPUn nor NICn", lineNo, f)
				}
				labels = append(labels, f)
			}
			for i, l := range labels {
				if _, dup := rows[l]; dup {
					return nil, fmt.Errorf("line %d: column %s appears twice", lineNo, l)
				}
				rows[l] = i
				m.Devices = append(m.Devices, topology.MatrixDevice{Label: l})
			}
			m.Cells = make([][]topology.Link, len(labels))
		case strings.HasPrefix(line, "Legend:"), strings.HasPrefix(line, "NIC Legend:"):
			inLegend = strings.HasPrefix(line, "NIC Legend:")
			afterRows = true
		case inLegend:
			label, name, ok := strings.Cut(strings.TrimSpace(line), ":")
			if !ok || !strings.HasPrefix(label, "NIC") {
				// The legend is over; what follows (notes, a prompt) is not ours.
				inLegend = false
				continue
			}
			i, known := rows[label]
			if !known {
				return nil, fmt.Errorf("line %d: NIC legend names %s, which is not a column", lineNo, label)
			}
			m.Devices[i].Name = strings.TrimSpace(name)
		case afterRows:
			// The level legend and whatever follows the NIC legend.
		default:
			i, known := rows[fields[0]]
			if !known {
				return nil, fmt.Errorf("line %d: row %q is not a column of the header", lineNo, fields[0])
			}
			if m.Cells[i] != nil {
				return nil, fmt.Errorf("line %d: row %s appears twice", lineNo, fields[0])
			}
			if len(fields)-1 < len(labels) {
				return nil, fmt.Errorf("line %d: row %s has %d cells, want %d", lineNo, fields[0], len(fields)-1, len(labels))
			}
			m.Cells[i] = make([]topology.Link, len(labels))
			for j := range labels {
				l, err := topology.ParseLink(fields[1+j])
				if err != nil {
					return nil, fmt.Errorf("line %d: row %s column %s: %w", lineNo, fields[0], labels[j], err)
				}
				m.Cells[i][j] = l
			}
			rest := fields[1+len(labels):]
			if m.Devices[i].IsGPU() && len(rest) >= 2 {
				m.Devices[i].CPUAffinity = naToEmpty(rest[0])
				m.Devices[i].NUMAAffinity = naToEmpty(rest[1])
				if len(rest) >= 3 {
					m.Devices[i].GPUNUMAID = naToEmpty(rest[2])
				}
			}
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if labels == nil {
		return nil, fmt.Errorf("no matrix header (a line starting with GPU0) found")
	}
	for i, row := range m.Cells {
		if row == nil {
			return nil, fmt.Errorf("row %s is missing", labels[i])
		}
	}
	for _, d := range m.Devices {
		if !d.IsGPU() && d.Name == "" {
			return nil, fmt.Errorf("%s has no entry in the NIC legend", d.Label)
		}
	}
	return m, nil
}

func naToEmpty(s string) string {
	if s == "N/A" {
		return ""
	}
	return s
}
