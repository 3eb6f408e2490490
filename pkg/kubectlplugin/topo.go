// Package kubectlplugin is `kubectl nicaffinity`: a node's GPU-NIC matrix
// from its published NodeResourceTopology, and why a pod is where it is
// (or is not placed). It reads published objects and events only; the
// command in cmd/kubectl-nicaffinity is a thin main around it.
package kubectlplugin

import (
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/k8stopologyawareschedwg/noderesourcetopology-api/pkg/apis/topology/v1alpha2"

	"github.com/nicaffinity/nicaffinity/pkg/nrt"
	"github.com/nicaffinity/nicaffinity/pkg/topology"
)

// Matrix is a node's GPU-NIC matrix as its object publishes it.
type Matrix struct {
	Node string      `json:"node"`
	GPUs []MatrixGPU `json:"gpus"`
	NICs []MatrixNIC `json:"nics"`
	// Blocked lists the paths on which GPUDirect RDMA cannot run, with why.
	Blocked []string `json:"blocked,omitempty"`
}

// MatrixGPU is a GPU row: its levels to the other GPUs and to the NICs.
type MatrixGPU struct {
	Zone  string `json:"zone"`
	BusID string `json:"busID"`
	// State is free, used, or missing (the device plugin does not offer it).
	State  string   `json:"state"`
	ToGPUs []string `json:"toGPUs"`
	ToNICs []string `json:"toNICs"`
	// P2CNICs are the NICs NCCL reaches at P2C from this GPU (through C2C),
	// where the level printed is farther.
	P2CNICs []string `json:"p2cNICs,omitempty"`
	Blocked []bool   `json:"-"`
	P2C     []bool   `json:"-"`
}

// MatrixNIC is a NIC column.
type MatrixNIC struct {
	Name  string `json:"name"`
	State string `json:"state"`
	// VFs are the free VFs per SR-IOV resource.
	VFs map[string]string `json:"vfs,omitempty"`
}

// BuildMatrix reads an object into a Matrix. The object is checked as the
// scheduler checks it (nrt.Compile); NICs that are down are left out, as
// the scheduler leaves them out.
func BuildMatrix(obj *v1alpha2.NodeResourceTopology, gpuResource string) (*Matrix, error) {
	c, err := nrt.Compile(obj, gpuResource)
	if err != nil {
		return nil, fmt.Errorf("NodeResourceTopology %s: %w", obj.Name, err)
	}
	m := &Matrix{Node: obj.Name}
	zones := map[string]v1alpha2.Zone{}
	for _, z := range obj.Zones {
		zones[z.Name] = z
	}
	for _, n := range c.NICs {
		nic := MatrixNIC{Name: n.Name, State: "ACTIVE"}
		for res, free := range n.VFs {
			if nic.VFs == nil {
				nic.VFs = map[string]string{}
			}
			nic.VFs[res] = strconv.FormatInt(free, 10)
		}
		m.NICs = append(m.NICs, nic)
	}
	for i, g := range c.GPUs {
		row := MatrixGPU{Zone: g.Zone, BusID: g.BusID, State: "used"}
		switch bit := nrt.GPUSet(1) << i; {
		case c.Healthy&bit == 0:
			row.State = "missing"
		case c.Free&bit != 0:
			row.State = "free"
		}
		costs := map[string]int64{}
		for _, cost := range zones[g.Zone].Costs {
			costs[cost.Name] = cost.Value
		}
		for j, peer := range c.GPUs {
			cell := "X"
			if j != i {
				cell = "?"
				if l, ok := nrt.LevelOf(costs[peer.Zone]); ok {
					cell = topology.Link{Level: l}.String()
				}
			}
			row.ToGPUs = append(row.ToGPUs, cell)
		}
		row.Blocked = make([]bool, len(c.NICs))
		row.P2C = make([]bool, len(c.NICs))
		for n := range c.NICs {
			row.ToNICs = append(row.ToNICs, g.Published[n].String())
			if g.Level[n] == topology.LevelP2C && g.Published[n] > topology.LevelP2C {
				row.P2C[n] = true
				row.P2CNICs = append(row.P2CNICs, c.NICs[n].Name)
			}
			if g.Blocked != nil && g.Blocked[n] != "" {
				row.Blocked[n] = true
				m.Blocked = append(m.Blocked, fmt.Sprintf("GPU%d-NIC%d (%s-%s): %s", i, n, g.BusID, c.NICs[n].Name, g.Blocked[n]))
			}
		}
		m.GPUs = append(m.GPUs, row)
	}
	return m, nil
}

func (m *Matrix) hasP2C() bool {
	for _, g := range m.GPUs {
		if len(g.P2CNICs) > 0 {
			return true
		}
	}
	return false
}

// Format prints the matrix in nvidia-smi's layout, with a State column:
// free, used or missing for GPUs. A "!" after a level marks a path on
// which GPUDirect RDMA cannot run (the list below says why), a "+" a pair
// NCCL reaches at P2C.
func (m *Matrix) Format() string {
	var b strings.Builder
	for i := range m.GPUs {
		fmt.Fprintf(&b, "\tGPU%d", i)
	}
	for i := range m.NICs {
		fmt.Fprintf(&b, "\tNIC%d", i)
	}
	b.WriteString("\tState\n")
	for i, g := range m.GPUs {
		fmt.Fprintf(&b, "GPU%d", i)
		for _, c := range g.ToGPUs {
			b.WriteString("\t " + c + " ")
		}
		for n, c := range g.ToNICs {
			switch {
			case g.Blocked[n]:
				c += "!"
			case g.P2C[n]:
				c += "+"
			}
			b.WriteString("\t " + c + " ")
		}
		b.WriteString("\t" + g.State + "\n")
	}
	for n, nic := range m.NICs {
		fmt.Fprintf(&b, "NIC%d", n)
		for _, g := range m.GPUs {
			c := g.ToNICs[n]
			switch {
			case g.Blocked[n]:
				c += "!"
			case g.P2C[n]:
				c += "+"
			}
			b.WriteString("\t " + c + " ")
		}
		for j := range m.NICs {
			if j == n {
				b.WriteString("\t X ")
			} else {
				b.WriteString("\t - ")
			}
		}
		state := nic.State
		if len(nic.VFs) > 0 {
			var vfs []string
			for res, free := range nic.VFs {
				vfs = append(vfs, res+" "+free+" free")
			}
			sort.Strings(vfs)
			state += ", " + strings.Join(vfs, ", ")
		}
		b.WriteString("\t" + state + "\n")
	}
	b.WriteString("\nLegend: levels as nvidia-smi topo -m prints them (PIX, PXB, PHB, NODE, SYS, NV#); - not published; ! GPUDirect RDMA impossible on that path\n")
	if m.hasP2C() {
		b.WriteString("        + NCCL's path is P2C (a Grace GPU through C2C to its CPU's NIC): NCCL's defaults use GPUDirect RDMA there\n")
	}
	if len(m.NICs) > 0 {
		b.WriteString("\nNIC Legend:\n\n")
		for n, nic := range m.NICs {
			fmt.Fprintf(&b, "  NIC%d: %s\n", n, nic.Name)
		}
	}
	if len(m.Blocked) > 0 {
		b.WriteString("\nGPUDirect RDMA impossible:\n")
		for _, s := range m.Blocked {
			b.WriteString("  " + s + "\n")
		}
	}
	return b.String()
}
