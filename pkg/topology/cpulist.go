package topology

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
)

// maxMaskGroups bounds a cpumask: 4096 groups of 32 bits are 131072 CPUs,
// far past any machine, and keep a hostile mask from costing more than a
// bounded, linear pass.
const maxMaskGroups = 4096

// CPUListFromMask turns a kernel cpumask ("ffff,fff00000,00ffffff", 32-bit
// groups, most significant first: the format of NCCL's affinity attribute and
// of sysfs local_cpus) into the cpulist format ("0-23,52-79"). It takes time
// linear in the mask's length.
func CPUListFromMask(mask string) (string, error) {
	groups := strings.Split(strings.TrimSpace(mask), ",")
	if len(groups) > maxMaskGroups {
		return "", fmt.Errorf("cpumask of %d groups: at most %d", len(groups), maxMaskGroups)
	}
	values := make([]uint32, len(groups))
	for i, group := range groups {
		g, err := strconv.ParseUint(group, 16, 32)
		if err != nil || group == "" {
			return "", fmt.Errorf("cpumask %q: group %q is not up to 8 hex digits", mask, group)
		}
		values[len(groups)-1-i] = uint32(g) // values[0] holds CPUs 0-31
	}
	var b strings.Builder
	start := -1 // first CPU of the run being read
	flush := func(end int) {
		if b.Len() > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.Itoa(start))
		if end > start {
			b.WriteByte('-')
			b.WriteString(strconv.Itoa(end))
		}
		start = -1
	}
	for gi, g := range values {
		for bit := 0; bit < 32; bit++ {
			cpu := gi*32 + bit
			if g&(1<<bit) != 0 {
				if start < 0 {
					start = cpu
				}
			} else if start >= 0 {
				flush(cpu - 1)
			}
		}
	}
	if start >= 0 {
		flush(len(values)*32 - 1)
	}
	return b.String(), nil
}

// MaxCPU bounds a CPU number in a cpulist: the kernel's NR_CPUS is at most
// 8192 on distribution kernels, so a list past this is not a machine's.
const MaxCPU = 1 << 16

// ParseCPUList reads the kernel's cpulist format ("0-47,96-143"; empty for
// none) into sorted CPU numbers. CPUs must be below MaxCPU, so the result
// is bounded whatever the input.
func ParseCPUList(s string) ([]int, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return nil, nil
	}
	seen := make(map[int]bool)
	var out []int
	for _, part := range strings.Split(s, ",") {
		lo, hi, isRange := strings.Cut(part, "-")
		a, err := strconv.Atoi(lo)
		b := a
		if err == nil && isRange {
			b, err = strconv.Atoi(hi)
		}
		if err != nil || a < 0 || b < a || b >= MaxCPU {
			return nil, fmt.Errorf("cpulist %q: %q is not a CPU or a range of CPUs below %d", s, part, MaxCPU)
		}
		for c := a; c <= b; c++ {
			if !seen[c] {
				seen[c] = true
				out = append(out, c)
			}
		}
	}
	sort.Ints(out)
	return out, nil
}
