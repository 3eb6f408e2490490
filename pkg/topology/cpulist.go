package topology

import (
	"fmt"
	"math/big"
	"strconv"
	"strings"
)

// CPUListFromMask turns a kernel cpumask ("ffff,fff00000,00ffffff", 32-bit
// groups, most significant first: the format of NCCL's affinity attribute and
// of sysfs local_cpus) into the cpulist format ("0-23,52-79").
func CPUListFromMask(mask string) (string, error) {
	var v big.Int
	for _, group := range strings.Split(strings.TrimSpace(mask), ",") {
		g, err := strconv.ParseUint(group, 16, 32)
		if err != nil || group == "" {
			return "", fmt.Errorf("cpumask %q: group %q is not up to 8 hex digits", mask, group)
		}
		v.Lsh(&v, 32)
		v.Or(&v, new(big.Int).SetUint64(g))
	}
	var parts []string
	n := v.BitLen()
	for i := 0; i < n; i++ {
		if v.Bit(i) == 0 {
			continue
		}
		j := i
		for j+1 < n && v.Bit(j+1) == 1 {
			j++
		}
		if i == j {
			parts = append(parts, strconv.Itoa(i))
		} else {
			parts = append(parts, fmt.Sprintf("%d-%d", i, j))
		}
		i = j
	}
	return strings.Join(parts, ","), nil
}
