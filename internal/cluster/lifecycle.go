package cluster

import (
	"context"
	"time"
)

// Lifecycle is what lifecycle events (contract section 13) need from the
// cluster, beside Backend: each decision that must hold cluster-wide is
// made in one atomic step of the backend, so that whatever the timing of
// nodes (two logins on two nodes, a node that died, two survivors that
// clean up after it), there is exactly one answer.
//
// Memory and Redis implement it; the gateway uses it only when
// WSGATE_EVENTS asks for an event that needs it.
type Lifecycle interface {
	// ConnUp records that the connection of route is live. online > 0
	// when it is the user's only live connection: the user's presence
	// counter v was raised to it in the same step. Calling it again for
	// the same connection changes nothing and answers the same online.
	ConnUp(ctx context.Context, route Route) (online int64, err error)
	// ConnDown claims the end of a connection on behalf of claimer (a
	// node id). Exactly one claimer ever gets Claimed for a connection;
	// the same claimer asking again gets the same answer (a retry after a
	// lost reply). Offline > 0 when no live connection of the user is
	// left: the presence counter was raised to it in the same step.
	ConnDown(ctx context.Context, user, connID, claimer string) (ConnEnd, error)
	// NodeConns lists the connections that ConnUp recorded on node and
	// whose end was not claimed (yet); DropNodeConns forgets the list of
	// a dead node once a ConnDown was made for each of them.
	// LifecycleNodes lists the nodes that have such a list.
	NodeConns(ctx context.Context, node string) ([]Route, error)
	DropNodeConns(ctx context.Context, node string) error
	LifecycleNodes(ctx context.Context) ([]string, error)

	// AddDue schedules undelivered checks (in one step: one pipeline on
	// Redis), each at d.Due, unless the user
	// acknowledged d.Seq (Acked) by then. ClaimDue takes up to max
	// checks that are due at now, in one atomic step: each is handed to
	// one caller, and comes back to ClaimDue after lease unless DoneDue
	// removed it (its caller died before reporting). Acked records the
	// user's highest acknowledged seq, which ClaimDue answers with each
	// check (Due.Acked).
	AddDue(ctx context.Context, ds ...Due) error
	ClaimDue(ctx context.Context, now time.Time, lease time.Duration, max int) ([]Due, error)
	DoneDue(ctx context.Context, d Due) error
	Acked(ctx context.Context, user string, seq int64) error
}

// ConnEnd is the answer to ConnDown.
type ConnEnd struct {
	Claimed bool
	Route   Route // as ConnUp recorded it (node, connected_at), when Claimed
	Offline int64 // > 0: the user has no live connection left; its new v
}

// Due is one scheduled undelivered check.
type Due struct {
	User      string `json:"u"`
	Seq       int64  `json:"s"`
	MessageID string `json:"m"`
	Event     string `json:"e"`
	Due       int64  `json:"d"` // Unix ms
	Acked     int64  `json:"-"` // ClaimDue: the user's highest acknowledged seq
	member    string // the stored form (Redis), for DoneDue
}
