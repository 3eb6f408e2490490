package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/spf13/cobra"

	"github.com/nicaffinity/nicaffinity/pkg/dra"
	"github.com/nicaffinity/nicaffinity/pkg/machines"
	"github.com/nicaffinity/nicaffinity/pkg/profiles"
	"github.com/nicaffinity/nicaffinity/pkg/topology"
	"github.com/nicaffinity/nicaffinity/pkg/topology/discovery"
	"github.com/nicaffinity/nicaffinity/pkg/topology/ncclxml"
	"github.com/nicaffinity/nicaffinity/pkg/topology/nvmlgpu"
)

type topoOptions struct {
	sysfsRoot string
	ncclXML   string
	profile   string
	nvml      string
	output    string
	list      bool
	dra       bool
	machine   string
}

func newTopoCommand() *cobra.Command {
	o := &topoOptions{}
	cmd := &cobra.Command{
		Use:   "topo",
		Short: "Print the GPU/NIC topology matrix as `nvidia-smi topo -m` does",
		Long: `Print the level (PIX, PXB, PHB, NODE, SYS, NV#) between every GPU and RDMA
device of a node, in the layout of ` + "`nvidia-smi topo -m`" + `.

By default it reads this host: the PCIe tree from /sys and GPU identity and
NVLinks from NVML when a driver is loaded. --sysfs-root reads another tree as
if it were /sys, --nccl-xml reads an NCCL topology XML (NCCL_TOPO_FILE), and
--machine shows a machine of nicaffinity's catalogue (--list-machines): a
built-in shape, read through the sysfs reader, or profile/<name>, a bundled
NCCL XML of a real machine (--profile <name> is the same).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return o.run(cmd.OutOrStdout(), nvmlgpu.New())
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.sysfsRoot, "sysfs-root", "/sys", "read this directory as if it were /sys")
	f.StringVar(&o.ncclXML, "nccl-xml", "", "read an NCCL topology XML file instead of the host")
	f.StringVar(&o.profile, "profile", "", "the same as --machine profile/NAME")
	f.BoolVar(&o.list, "list-machines", false, "list the machine catalogue (shapes, then profile/<name>) and exit")
	f.BoolVar(&o.list, "list-profiles", false, "the same as --list-machines")
	f.StringVar(&o.nvml, "nvml", "auto", "use NVML for GPU identity and NVLinks: auto (when a driver is there), on (fail without it), off")
	f.StringVarP(&o.output, "output", "o", "text", "output format: text or json")
	f.BoolVar(&o.dra, "dra", false, "say whether DRA's resource.kubernetes.io/pcieRoot aligns every GPU-NIC pair (PXB or closer), and list the pairs where it does not")
	f.StringVar(&o.machine, "machine", "", "a machine of the catalogue (--list-machines): a built-in shape, read as sysfs, or profile/<name>")
	return cmd
}

func (o *topoOptions) run(w io.Writer, nvml discovery.NVMLReader) error {
	if o.list {
		for _, n := range machines.Names() {
			fmt.Fprintln(w, n)
		}
		return nil
	}
	if o.output != "text" && o.output != "json" {
		return fmt.Errorf("--output %q: want text or json", o.output)
	}
	if err := discovery.ValidateNVMLMode(o.nvml); err != nil {
		return fmt.Errorf("--nvml: %w", err)
	}
	if n := countSet(o.ncclXML, o.profile, o.machine); n > 1 {
		return errors.New("--nccl-xml, --profile and --machine are exclusive")
	}
	topo, err := o.load(nvml)
	if err != nil {
		return err
	}
	if o.dra {
		return printDRACheck(w, dra.CheckTopology(o.sourceName(), topo, topology.LevelP2C), o.output)
	}
	m := topo.Matrix()
	if len(topo.GPUs) == 0 && o.output == "text" {
		return fmt.Errorf("%s: no GPU found (%d RDMA NICs, %s), so there is no GPU-NIC matrix to show; --machine shows one of the catalogue (--list-machines)",
			o.sourceName(), len(topo.NICs), nvmlState(topo))
	}
	if o.output == "json" {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		enc.SetEscapeHTML(false)
		return enc.Encode(struct {
			Source string   `json:"source"`
			NVML   bool     `json:"nvml"`
			Notes  []string `json:"notes,omitempty"`
			*topology.Matrix
			// GPUDirect is NCCL's view of every GPU-NIC pair (docs/levels.md).
			GPUDirect []topology.GPUDirectPair `json:"gpudirect"`
		}{topo.Source, topo.NVML, topo.Notes, m, topo.GPUDirectPairs()})
	}
	fmt.Fprint(w, m.Format())
	if len(topo.Notes) > 0 {
		fmt.Fprintf(w, "\nNotes (%s):\n", topo.Source)
		for _, n := range topo.Notes {
			fmt.Fprintf(w, "  %s\n", n)
		}
	}
	return nil
}

func (o *topoOptions) sourceName() string {
	switch {
	case o.machine != "":
		return o.machine
	case o.profile != "":
		return o.profile
	case o.ncclXML != "":
		return o.ncclXML
	}
	return "sysfs " + o.sysfsRoot
}

func (o *topoOptions) load(nvml discovery.NVMLReader) (*topology.Topology, error) {
	switch {
	case o.machine != "":
		return loadMachine(o.machine)
	case o.profile != "":
		return profiles.Load(o.profile)
	case o.ncclXML != "":
		f, err := os.Open(o.ncclXML)
		if err != nil {
			return nil, err
		}
		defer f.Close()
		t, err := ncclxml.Parse(f)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", o.ncclXML, err)
		}
		return t, nil
	}
	return discovery.Host{SysfsRoot: o.sysfsRoot, NVMLMode: o.nvml, NVML: nvml}.Discover()
}

func countSet(values ...string) int {
	n := 0
	for _, v := range values {
		if v != "" {
			n++
		}
	}
	return n
}

// nvmlState says what NVML contributed to a topology, for messages.
func nvmlState(t *topology.Topology) string {
	if t.NVML {
		return "NVML read"
	}
	return "NVML not used: no driver, or --nvml off"
}
