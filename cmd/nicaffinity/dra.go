package main

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"
	"sigs.k8s.io/yaml"

	"github.com/nicaffinity/nicaffinity/pkg/annotations"
	"github.com/nicaffinity/nicaffinity/pkg/apis/config"
	"github.com/nicaffinity/nicaffinity/pkg/dra"
	"github.com/nicaffinity/nicaffinity/pkg/machines"
	"github.com/nicaffinity/nicaffinity/pkg/topology"
	"github.com/nicaffinity/nicaffinity/pkg/topology/discovery"
	"github.com/nicaffinity/nicaffinity/pkg/topology/nvmlgpu"
)

// machineNames are the catalogue's sysfs shapes (pkg/machines), the names
// `--machine` lists. DRA's pcieRoot needs host bridges, which only sysfs
// names (NCCL XML groups devices by CPU); the catalogue's profiles are
// accepted too, as profile/<name>.
func machineNames() string { return strings.Join(machines.ShapeNames(), ", ") }

// loadMachine reads a machine of the catalogue.
func loadMachine(name string) (*topology.Topology, error) { return machines.Load(name) }

func printDRACheck(w io.Writer, c dra.Check, output string) error {
	if output == "json" {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(c)
	}
	var sb strings.Builder
	switch {
	case !c.Known:
		fmt.Fprintf(&sb, "DRA pcieRoot on %s: cannot tell. %s\n", c.Machine, c.Why)
	case c.Enough:
		fmt.Fprintf(&sb, "DRA pcieRoot on %s: enough. Every GPU-NIC pair on one root is at %s or closer (%d pairs), and every GPU with an aligned NIC has one on its root: matchAttribute: resource.kubernetes.io/pcieRoot aligns them.\n", c.Machine, c.MaxLevel, c.SameRoot)
	case len(c.Unaligned) > 0:
		fmt.Fprintf(&sb, "DRA pcieRoot on %s: NOT enough. %d of %d GPU-NIC pairs on one root are past %s, so matchAttribute on pcieRoot can give a pair without GPUDirect RDMA. Use a template with a derived attribute (nicaffinity dra claims --derived).\n", c.Machine, len(c.Unaligned), c.SameRoot, c.MaxLevel)
	default:
		fmt.Fprintf(&sb, "DRA pcieRoot on %s: NOT enough. %d GPUs have aligned NICs (at %s or closer) only on other roots, so matchAttribute on pcieRoot refuses every aligned pair of theirs. Use a template with a derived attribute (nicaffinity dra claims --derived).\n", c.Machine, len(c.Stranded), c.MaxLevel)
	}
	pairs := func(title string, ps []dra.Pair) {
		if len(ps) == 0 {
			return
		}
		fmt.Fprintf(&sb, "\n%s:\n", title)
		for _, p := range ps {
			fmt.Fprintf(&sb, "  GPU%d %s (%s)  %s %s (%s)  %s\n", p.GPU, p.GPUBusID, p.GPURoot, p.NIC, p.NICBusID, p.NICRoot, p.Level)
		}
	}
	pairs("Same pcieRoot, past "+c.MaxLevel+" (matchAttribute lets these through)", c.Unaligned)
	pairs("Aligned but on different roots (matchAttribute refuses these)", c.Missed)
	if len(c.Stranded) > 0 {
		fmt.Fprintf(&sb, "\nGPUs with an aligned NIC but none on their root: %v\n", c.Stranded)
	}
	_, err := io.WriteString(w, sb.String())
	return err
}

type draClaimsOptions struct {
	machines                    []string
	sysfsRoot, output, maxLevel string
	claim                       dra.ClaimOptions
}

func newDRACommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "dra",
		Short: "Dynamic Resource Allocation: claim templates that align GPUs with their NICs",
	}
	o := &draClaimsOptions{claim: dra.ClaimOptions{Name: "gpus-with-nics", Namespace: "default", GPUs: 1, GPUsPerNIC: 1, GPUClass: dra.GPUClass, NICClass: dra.NICClass}}
	claims := &cobra.Command{
		Use:   "claims",
		Short: "Write a ResourceClaimTemplate for N GPUs, each group with an aligned NIC",
		Long: `Write a ResourceClaimTemplate (resource.k8s.io/v1) for --gpus GPUs in groups
of --gpus-per-nic, each group with one NIC at --max-level (PXB) or closer on
the given machine shape: matchAttribute on resource.kubernetes.io/pcieRoot
where that is enough there (nicaffinity topo --dra says), else, with
--derived, a derived attribute that maps each device's
resource.kubernetes.io/pciBusID to its alignment group (the
DRADerivedAttributes feature gate, alpha in Kubernetes 1.37). Device classes
default to the NVIDIA GPU driver's and dranet's (docs/dra.md).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return o.run(cmd.OutOrStdout())
		},
	}
	f := claims.Flags()
	f.StringSliceVar(&o.machines, "machine", nil, "a built-in machine shape, or several (repeated or comma-separated) for one template that aligns on each: "+machineNames())
	f.StringVar(&o.sysfsRoot, "sysfs-root", "", "read this directory as the machine's /sys (default: this host's, without --machine)")
	f.IntVar(&o.claim.GPUs, "gpus", o.claim.GPUs, "GPUs in the claim")
	f.IntVar(&o.claim.GPUsPerNIC, "gpus-per-nic", o.claim.GPUsPerNIC, "GPUs that share one NIC")
	f.BoolVar(&o.claim.Derived, "derived", false, "allow a derived attribute where pcieRoot is not enough (DRADerivedAttributes feature gate)")
	f.BoolVar(&o.claim.SharedNICs, "shared-nics", false, "the NIC driver shares NICs between claims (allowMultipleAllocations), as the RDMA shared device plugin does: select the GPUs that have an aligned NIC and take every NIC (no pairs, no alpha feature)")
	f.BoolVar(&o.claim.NoNIC, "no-nic", false, "a claim for a job that uses no NIC: GPUs without an aligned NIC first, any else (keeps the aligned GPUs for RDMA jobs)")
	f.StringVar(&o.claim.Name, "name", o.claim.Name, "the template's name")
	f.StringVarP(&o.claim.Namespace, "namespace", "n", o.claim.Namespace, "the template's namespace")
	f.StringVar(&o.claim.GPUClass, "gpu-class", o.claim.GPUClass, "the GPUs' DeviceClass")
	f.StringVar(&o.claim.NICClass, "nic-class", o.claim.NICClass, "the NICs' DeviceClass ("+dra.NICClass+": dranet; the SR-IOV DRA driver's for VFs)")
	f.StringVar(&o.maxLevel, "max-level", config.DefaultMaxLevel, "the worst GPU-NIC level that counts as aligned")
	f.StringVarP(&o.output, "output", "o", "yaml", "output format: yaml or json")
	cmd.AddCommand(claims)
	return cmd
}

func (o *draClaimsOptions) run(w io.Writer) error {
	if o.output != "yaml" && o.output != "json" {
		return fmt.Errorf("--output %q: want yaml or json", o.output)
	}
	level, err := annotations.ParseMaxLevel(o.maxLevel)
	if err != nil {
		return fmt.Errorf("--max-level: %w", err)
	}
	o.claim.MaxLevel = level
	var shapes []dra.Machine
	switch {
	case len(o.machines) > 0 && o.sysfsRoot != "":
		return fmt.Errorf("--machine and --sysfs-root are exclusive")
	case len(o.machines) > 0:
		for _, m := range o.machines {
			topo, err := loadMachine(m)
			if err != nil {
				return err
			}
			shapes = append(shapes, dra.Machine{Name: m, Topology: topo})
		}
	default:
		root := o.sysfsRoot
		if root == "" {
			root = "/sys"
		}
		topo, err := discovery.Host{SysfsRoot: root, NVMLMode: discovery.NVMLAuto, NVML: nvmlgpu.New()}.Discover()
		if err != nil {
			return err
		}
		shapes = []dra.Machine{{Name: "sysfs " + root, Topology: topo}}
	}
	var names []string
	for _, m := range shapes {
		names = append(names, m.Name)
	}
	name := strings.Join(names, ", ")
	level = dra.EffectiveLevel(shapes, level)
	c, err := dra.BuildClaimsFor(shapes, o.claim)
	if err != nil {
		return err
	}
	if o.output == "json" {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(c)
	}
	b, err := yaml.Marshal(c.Template)
	if err != nil {
		return err
	}
	var sb strings.Builder
	if o.claim.NoNIC {
		fmt.Fprintf(&sb, "# %s: %d GPUs for a job without a NIC, those past %s first, by %s.\n", name, o.claim.GPUs, level, c.Method)
	} else if c.Method == dra.MethodSelector {
		fmt.Fprintf(&sb, "# %s: %d GPUs with every NIC (shared), aligned at %s or closer by %s.\n", name, o.claim.GPUs, level, c.Method)
	} else {
		fmt.Fprintf(&sb, "# %s: %d GPUs, %d per NIC, aligned at %s or closer by %s.\n", name, o.claim.GPUs, o.claim.GPUsPerNIC, level, c.Method)
	}
	for _, n := range c.Notes {
		fmt.Fprintf(&sb, "# %s\n", n)
	}
	sb.WriteString(strings.Replace(string(b), "status: {}\n", "", 1))
	_, err = io.WriteString(w, sb.String())
	return err
}
