package gpualloc

import "github.com/NVIDIA/go-gpuallocator/gpuallocator"

// p2pLinks holds one P2PLink per link type value: the type's named type lives
// in an internal package of go-gpuallocator, so values are set here from
// constants (1..5 PCIe SYS..PIX, 6 same board, 6+n n NVLinks).
var p2pLinks = [...]gpuallocator.P2PLink{
	{Type: 0}, {Type: 1}, {Type: 2}, {Type: 3}, {Type: 4}, {Type: 5}, {Type: 6},
	{Type: 7}, {Type: 8}, {Type: 9}, {Type: 10}, {Type: 11}, {Type: 12}, {Type: 13}, {Type: 14}, {Type: 15},
	{Type: 16}, {Type: 17}, {Type: 18}, {Type: 19}, {Type: 20}, {Type: 21}, {Type: 22}, {Type: 23}, {Type: 24},
}

func p2pLink(peer *gpuallocator.Device, linkType int) gpuallocator.P2PLink {
	l := p2pLinks[linkType]
	l.GPU = peer
	return l
}
