package protocol

// Close codes of contract §4.4.
const (
	CloseNormal       = 1000 // normal: stop
	CloseGoingAway    = 1001 // node shutting down without a target: reconnect with backoff
	ClosePolicy       = 1008 // policy violation (bad frames): stop, report
	CloseTooBig       = 1009 // frame too big: stop, report
	CloseDraining     = 4001 // draining: reconnect now (to the redirect url if one came)
	CloseDisconnected = 4003 // disconnected by the server API: stop
	CloseSlowConsumer = 4008 // outbound queue overflowed: reconnect with since
	CloseReplaced     = 4009 // replaced by a newer connection of the same user: stop
	CloseTokenExpired = 4401 // token expired: get a new token, reconnect
	CloseRateLimited  = 4429 // message rate exceeded: reconnect after backoff
)

// Action is what a client should do after a close.
type Action int

const (
	ActionStop         Action = iota // do not reconnect
	ActionBackoff                    // reconnect with exponential backoff and jitter
	ActionNow                        // reconnect at once (small jitter), to the redirect url if any
	ActionRefreshToken               // get a new token, then reconnect
)

// CloseAction maps a close code to the client's action. Codes not in the
// contract (network errors, 1006) reconnect with backoff.
func CloseAction(code int) Action {
	switch code {
	case CloseNormal, ClosePolicy, CloseTooBig, CloseDisconnected, CloseReplaced:
		return ActionStop
	case CloseDraining:
		return ActionNow
	case CloseTokenExpired:
		return ActionRefreshToken
	default: // 1001, 4008, 4429, abnormal closures
		return ActionBackoff
	}
}

// CloseReason gives the short text sent in a close frame.
func CloseReason(code int) string {
	switch code {
	case CloseNormal:
		return "normal"
	case CloseGoingAway:
		return "node shutting down"
	case ClosePolicy:
		return "policy violation"
	case CloseTooBig:
		return "frame too big"
	case CloseDraining:
		return "draining"
	case CloseDisconnected:
		return "disconnected"
	case CloseSlowConsumer:
		return "slow consumer"
	case CloseReplaced:
		return "replaced by a newer connection"
	case CloseTokenExpired:
		return "token expired"
	case CloseRateLimited:
		return "message rate exceeded"
	}
	return ""
}
