package nicaffinity

import (
	"github.com/nicaffinity/nicaffinity/pkg/placement"
)

// request is what a pod asks for (pkg/placement), computed once in PreFilter.
type request = placement.Request

type vfRequest = placement.VF

// nodeView is what Filter and Score read of one node: the compiled object
// and what this scheduler reserved that the object does not show yet. Views
// are immutable; the cache swaps in a new one on every change.
type nodeView struct {
	// Node is the compiled object and what is free after reservations:
	// what pkg/placement decides on. Its C is nil when the node's object
	// cannot be used; why says why, following "NodeResourceTopology "
	// ("cannot be read: ...", "is stale: ...").
	placement.Node
	why string
	// state is the node's topology_nodes state (stateUsable, ...; ""
	// without an object): what metrics read, where why is for people.
	state string
	// stale is set while the object does not count every pod placed here.
	stale bool
	// foreign names a pod another scheduler bound here with GPUs that the
	// object does not count yet ("" for none): which GPUs it gets is
	// unknown, so required RDMA pods wait for the object.
	foreign string
	// answers[g] are Filter's and Score's answers for a common request of
	// g GPUs (0 < g < answered), computed once when the view is built: most
	// pods ask the same few things of a node that changes far less often
	// than it is asked. answered is 0 until the plugin sets them up.
	answers  [maxAnswered]answer
	answered int
}

// maxAnswered bounds the precomputed answers: requests of 1 to
// maxAnswered-1 GPUs (nodes of up to 16 GPUs get an answer for every size
// they can take partly); larger requests search.
const maxAnswered = 16

// commonAnswer is the view's precomputed answer for req, if it has one.
func (v *nodeView) commonAnswer(req *request) (answer, bool) {
	if !req.Common || req.GPUs >= v.answered {
		return answer{}, false
	}
	return v.answers[req.GPUs], true
}

// answer is what a common request of some number of GPUs gets from one
// view: with RDMA, whether it fits and its score; without, its score.
type answer struct {
	feasible bool
	// Scores are 0..MaxNodeScore (100).
	score, plain uint8
}
