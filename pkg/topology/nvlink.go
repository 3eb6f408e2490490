package topology

// PairNVLinks turns per-GPU NVLink counts into pairs: links straight from GPU
// i to GPU j (direct[i][j], counted from either end), plus, when both GPUs
// reach NVSwitches, the smaller of their switch link counts. That is the NV#
// nvidia-smi prints: NV18 between any two H100s of an HGX board, each with 18
// links into its NVSwitches. indices maps position to GPU index.
func PairNVLinks(indices []int, direct [][]int, toSwitch []int) []NVLink {
	var out []NVLink
	for i := range indices {
		for j := i + 1; j < len(indices); j++ {
			c := max(direct[i][j], direct[j][i])
			if toSwitch[i] > 0 && toSwitch[j] > 0 {
				c += min(toSwitch[i], toSwitch[j])
			}
			if c > 0 {
				out = append(out, NVLink{GPU: indices[i], Peer: indices[j], Count: c})
			}
		}
	}
	return out
}
