// Package cluster holds the state that gateway nodes share: user routes,
// node records, room membership, per-user reliable inboxes and the
// cross-node bus. Backend is the boundary; Memory is the embedded
// single-node implementation and Redis the clustered one. Both pass the
// same conformance suite (package clustertest).
//
// Every method takes a context and must return promptly when it is done:
// callers bound API calls to 5 s and background work to shorter periods.
package cluster

import (
	"context"
	"errors"
	"time"
)

// ErrUnavailable wraps every error caused by the backend being unreachable.
var ErrUnavailable = errors.New("cluster backend unavailable")

// NodeStatus is the lifecycle state of a gateway node.
type NodeStatus string

const (
	StatusWarming  NodeStatus = "warming"
	StatusActive   NodeStatus = "active"
	StatusDraining NodeStatus = "draining"
)

// NodeInfo is the record a node keeps fresh in the cluster.
type NodeInfo struct {
	ID          string     `json:"id"`
	URL         string     `json:"url"`     // advertised WebSocket URL
	APIURL      string     `json:"api_url"` // http base URL of the node (allocator, console)
	Status      NodeStatus `json:"status"`
	Weight      int        `json:"weight"` // 0..100; warming nodes rise to 100
	Connections int        `json:"connections"`
	Load        float64    `json:"load"`       // CPU use of the process, 0..1 per core
	StartedAt   int64      `json:"started_at"` // Unix ms
	Heartbeat   int64      `json:"heartbeat"`  // Unix ms of the last report
	Version     string     `json:"version"`
	// IDPrefix starts every connection id the node gives (while this
	// process runs): it names the node that holds a connection.
	IDPrefix string `json:"id_prefix,omitempty"`
	// Published and Delivered are the node's message counters since it
	// started (wsgate_messages_published_total, summed over targets, and
	// wsgate_messages_delivered_total): two records give the rates.
	Published int64 `json:"published,omitempty"`
	Delivered int64 `json:"delivered,omitempty"`
}

// Route says that connection ConnID of User lives on Node. Device names
// the client's device ("" is DefaultDevice).
type Route struct {
	User        string `json:"user"`
	ConnID      string `json:"conn_id"`
	Node        string `json:"node"`
	ConnectedAt int64  `json:"connected_at"` // Unix ms
	Device      string `json:"device"`
	// Info is the token's info claim (its raw JSON; "" when none), shown
	// in presence; kept with the route. A string keeps Route comparable.
	Info string `json:"info,omitempty"`
}

// DefaultDevice is the device of a client that names none: a user whose
// clients name no device has this one device, which is the v1 behaviour
// (one acknowledgement position per user).
const DefaultDevice = "default"

// MaxDevices bounds the devices a user's inbox keeps an acknowledgement
// position for. A device connecting for the first time while the user has
// MaxDevices of them makes the backend forget the least recently seen one
// (its acknowledgement stops holding messages back; when it comes back it
// is a new device and gets every message still kept).
const MaxDevices = 32

// deviceOf is the route's device, DefaultDevice when unnamed.
func deviceOf(name string) string {
	if name == "" {
		return DefaultDevice
	}
	return name
}

// InboxMessage is one reliable message kept for a user. Payload is opaque
// to the backend (the gateway stores the encoded message without its seq).
type InboxMessage struct {
	Seq     int64
	Payload []byte
}

// InboxRead is the answer to ReadInbox.
type InboxRead struct {
	Messages []InboxMessage // kept messages with seq > since, in seq order
	GapFrom  int64          // when GapTo >= GapFrom > 0: seqs GapFrom..GapTo were dropped (limit or TTL)
	GapTo    int64
	LastSeq  int64 // highest seq ever assigned to the user
	// Acked: for ReadInbox, the seq up to which every device acknowledged
	// (those messages are gone from the inbox); for Connect, the
	// acknowledgement of the connecting device (at least that).
	Acked int64
}

// ConnLimit bounds a user's connections at Connect: Max live routes
// (0 = no limit), not counting routes on IgnoreNodes (dead nodes).
type ConnLimit struct {
	Max         int
	IgnoreNodes []string
}

// ErrConnLimit is Connect's answer when the user has lim.Max routes.
var ErrConnLimit = errors.New("cluster: user has too many connections")

// Joined is what JoinRoom reads for the joining node: the user's live
// routes and the room's last seq (0: no reliable message yet).
type Joined struct {
	Routes  []Route
	RoomSeq int64
}

// ErrRoomLimit is JoinRoom's answer when the user holds maxRooms rooms.
var ErrRoomLimit = errors.New("cluster: user is a member of too many rooms")

// ConnectResult is the answer to Connect.
type ConnectResult struct {
	Rooms []string  // the user's rooms
	Inbox InboxRead // as ReadInbox(since)
	// Unconfirmed: the inbox had messages to replay, but fewer replicas
	// than RedisOptions.Replicas confirmed them in time; Inbox has no
	// messages and no gap then (LastSeq and Acked are kept), and the
	// caller reads them again (ReadInbox) until the replicas confirm.
	Unconfirmed bool
}

// AppendResult is the answer to AppendInbox.
type AppendResult struct {
	Seq    int64
	Routes []Route // the user's live routes at the time of the append
	// Existing: the append's Key had stored the message already (Seq is
	// that message's); nothing was stored now.
	Existing bool
}

// InboxAppend is one message of AppendInboxes.
type InboxAppend struct {
	User    string
	Payload []byte
	// Key, when set, binds the message to a publisher idempotency key in
	// the same atomic step as the append: for KeyLifetime, another append
	// to the user with the same Key stores nothing and answers the first
	// one's seq (AppendResult.Existing), also when the first append's
	// caller got an error (a timeout, ErrNotReplicated).
	Key string
}

// KeyLifetime is how long an idempotency key is remembered, by ClaimKey
// callers (the gateway) and by inbox appends (InboxAppend.Key).
const KeyLifetime = 5 * time.Minute

// ClaimLease is how long a pending idempotency claim belongs to its
// caller. It exceeds the longest a publish holds a claim (the API's 5 s
// bound, then 4 s to store the answer), so a claim still pending after it
// has no caller left: a retry with the same body takes it over.
const ClaimLease = 10 * time.Second

// KeyClaim is the answer to ClaimKey.
type KeyClaim struct {
	Claimed  bool   // the caller runs the call, with message id ID
	ID       string // the message id of the first call for the key
	Answer   []byte // the stored answer (not claimed, call done)
	Conflict bool   // the key was claimed for another fingerprint
}

// AppendOutcome is the answer to one message of AppendInboxes: its result,
// or the error that kept it from being stored.
type AppendOutcome struct {
	AppendResult
	Err error
}

// RoomAppend is one message of AppendRooms: a reliable room message.
// Payload is opaque, as for the inbox; Key binds an idempotency key in the
// same atomic step, exactly as InboxAppend.Key does.
type RoomAppend struct {
	Room    string
	Payload []byte
	Key     string
}

// RoomAppendResult is the answer to one room append.
type RoomAppendResult struct {
	Seq      int64
	Nodes    []string // the nodes with interest in the room at the time of the append
	Existing bool     // as AppendResult.Existing
}

// RoomAppendOutcome is the answer to one message of AppendRooms.
type RoomAppendOutcome struct {
	RoomAppendResult
	Err error
}

// BusMessage is one payload for one node (SendEach).
type BusMessage struct {
	Node    string
	Payload []byte
}

// InboxOptions bound a user's inbox.
type InboxOptions struct {
	Limit int           // messages kept; older ones are dropped first
	TTL   time.Duration // lifetime of each message
}

// The backend's roles (the groups of the shared suite, clustertest): a
// part of the node that needs one role takes that interface, and a test
// double implements only what its test touches.

// NodeRegistry holds the node records (heartbeats, liveness, the
// allocator's and the autoscaler's view).
type NodeRegistry interface {
	// RegisterNode creates or overwrites the node's record; Heartbeat does
	// the same and reports whether the record had vanished since the last
	// call (the backend lost its data): the caller then re-registers its
	// routes and room interest.
	RegisterNode(ctx context.Context, n NodeInfo) error
	Heartbeat(ctx context.Context, n NodeInfo) (lost bool, err error)
	// RemoveNode deletes the node's record and every room interest it
	// declared (a drained node on its way out, or a survivor cleaning up
	// after a node whose heartbeat stopped).
	RemoveNode(ctx context.Context, id string) error
	Nodes(ctx context.Context) ([]NodeInfo, error)
}

// Routes says where each user's connections are.
type Routes interface {
	// Connect is what a new connection needs in one step: it registers the
	// route (as AddRoutes), then reads the user's rooms and inbox after
	// since (as UserRooms and ReadInbox). It also marks the route's device
	// as seen now (a device never seen, or not within opt.TTL, starts at
	// the acknowledgement of every device, so it gets every message still
	// kept); with since < 0 the inbox is read after that device's own
	// acknowledgement, and the gap is counted from it. The route is stored before the
	// reads, so a message appended after the read is routed to the new
	// connection. The Redis backend runs it as one script and pipelines
	// concurrent calls, so a connect storm costs a fraction of a round trip
	// per connection.
	//
	// With lim.Max > 0 the route is stored only if the user has fewer than
	// lim.Max other live routes (not expired, not on a node of
	// lim.IgnoreNodes), checked and stored in the same atomic step, so
	// that concurrent connects of one user on any nodes never exceed it;
	// otherwise nothing is stored and the error is ErrConnLimit.
	Connect(ctx context.Context, route Route, ttl time.Duration, since int64, opt InboxOptions, lim ConnLimit) (ConnectResult, error)

	// AddRoutes registers or refreshes routes (batched: one call per many
	// connections) with the given lifetime.
	AddRoutes(ctx context.Context, routes []Route, ttl time.Duration) error
	// RemoveRoute deletes the route of exactly this connection id, atomically:
	// a route of another connection of the same user is never touched.
	RemoveRoute(ctx context.Context, user, connID string) error
	// RemoveRoutes is RemoveRoute for many connections in one call
	// (pipelined): what a node uses when connections end in numbers.
	RemoveRoutes(ctx context.Context, routes []Route) error
	// UserRoutes lists the user's routes that have not expired.
	UserRoutes(ctx context.Context, user string) ([]Route, error)
	// UsersRoutes is UserRoutes for many users in one step (one pipeline
	// on Redis): out[i] are the routes of users[i].
	UsersRoutes(ctx context.Context, users []string) ([][]Route, error)
}

// Rooms holds membership by user and which nodes hold a room's members.
type Rooms interface {
	// Room membership, by user. RoomNodes lists the nodes that declared
	// interest in a room (they hold a member's connection).
	//
	// JoinRoom refuses with ErrRoomLimit a join that would give the user
	// more than maxRooms rooms (0 = no limit), atomically: concurrent joins
	// of one user never exceed it. Joining a room the user is a member of
	// is never refused. It answers what the joining node needs next, read
	// in the same step (one round trip on Redis): the user's routes, read
	// after the membership is stored (a Connect stores its route before it
	// reads the user's rooms, so one of the two sees the other), and the
	// room's last seq as RoomSeqs reads it.
	JoinRoom(ctx context.Context, room, user string, maxRooms int) (Joined, error)
	LeaveRoom(ctx context.Context, room, user string) error
	RoomMembers(ctx context.Context, room string) ([]string, error)
	UserRooms(ctx context.Context, user string) ([]string, error)
	// JoinSeqs answers, for each of rooms, the room's seq when the user's
	// membership was stored (JoinRoom's RoomSeq of the first join; a
	// repeated join keeps it, a leave forgets it), or -1 when the user is
	// not a member or the membership did not record it (stored by an
	// earlier version). A node that missed a membership follows the room
	// from there: what came after the join is owed.
	JoinSeqs(ctx context.Context, user string, rooms []string) ([]int64, error)
	SetRoomInterest(ctx context.Context, node string, rooms []string, ttl time.Duration) error
	DropRoomInterest(ctx context.Context, node string, rooms []string) error
	RoomNodes(ctx context.Context, room string) ([]string, error)
}

// Inbox holds each user's reliable messages, seqs and acknowledgements.
type Inbox interface {
	// AppendInbox assigns the user's next seq and stores the message in one
	// atomic step, trims the inbox to opt, and returns the seq with the
	// user's routes. ReadInbox returns what is kept after since.
	//
	// Ack moves device's acknowledgement to seq (cumulative; never
	// backwards, never beyond the last seq assigned) and marks the device
	// seen; then every message acknowledged by each device seen within
	// opt.TTL (by Connect or Ack) leaves the inbox. Devices not seen
	// within opt.TTL are forgotten. An Ack of a device the backend does
	// not keep while the user has MaxDevices others changes nothing.
	AppendInbox(ctx context.Context, user string, payload []byte, opt InboxOptions) (AppendResult, error)
	ReadInbox(ctx context.Context, user string, since int64, opt InboxOptions) (InboxRead, error)
	Ack(ctx context.Context, user, device string, seq int64, opt InboxOptions) error
	// AppendInboxes is AppendInbox for many messages at once (a batch
	// publish): each message is appended atomically as by AppendInbox, in
	// the order given (one user's messages get increasing seqs in that
	// order), and has its own outcome: one failing does not fail the
	// others. out[i] answers msgs[i]. The Redis backend sends them in one
	// pipeline (several users per script where the deployment allows).
	AppendInboxes(ctx context.Context, msgs []InboxAppend, opt InboxOptions) []AppendOutcome
	LastSeq(ctx context.Context, user string) (int64, error)
	// LastSeqs is LastSeq for many users in one step (pipelined on
	// Redis): out[i] is the last seq of users[i].
	LastSeqs(ctx context.Context, users []string) ([]int64, error)
}

// History holds the reliable rooms' messages and seqs.
type History interface {
	// Reliable rooms. AppendRooms gives each message its room's next seq,
	// stores it in the room's history, trims the history to opt (Limit
	// messages, each kept TTL) and reads the room's interested nodes, all
	// in one atomic step per message (one script, one round trip for the
	// whole call on Redis); one room's messages get increasing seqs in the
	// order given, and each message has its own outcome. ReadRoom returns
	// the kept messages with seq > since, oldest first, at most most (0: no
	// bound), with the gap of what was trimmed after since (InboxRead.Acked
	// is always 0: history is not acknowledged) and the room's last seq.
	// RoomSeqs is the last seq of each room (0: the room never had a
	// reliable message) in one step (pipelined on Redis).
	AppendRooms(ctx context.Context, msgs []RoomAppend, opt InboxOptions) []RoomAppendOutcome
	ReadRoom(ctx context.Context, room string, since int64, most int, opt InboxOptions) (InboxRead, error)
	// ReadRoomBefore is ReadRoom backwards (a history page, contract 19):
	// the kept messages with seq < before (before <= 0: no bound), newest
	// first, at most most (0: no bound), and the room's last seq; the gap
	// fields stay 0 (a page read backwards names no gap).
	ReadRoomBefore(ctx context.Context, room string, before int64, most int, opt InboxOptions) (InboxRead, error)
	RoomSeqs(ctx context.Context, rooms []string) ([]int64, error)
}

// Bus carries messages between nodes.
type Bus interface {
	// Bus: Send delivers payload to the named nodes' subscriptions (never
	// to others); Broadcast to every node. Subscribe starts delivering this
	// node's messages to handle until ctx ends; handle must not block.
	// After the subscription was lost and restored (a reconnect), handle
	// is called once with a nil payload before the messages that follow:
	// messages sent meanwhile may have been lost, and the node should
	// catch up what it may have missed.
	Send(ctx context.Context, nodes []string, payload []byte) error
	// SendEach sends each message's payload to its node, in order, in one
	// step (one pipeline on Redis): what a batch publish uses to give every
	// node one envelope of its own.
	SendEach(ctx context.Context, msgs []BusMessage) error
	Broadcast(ctx context.Context, payload []byte) error
	Subscribe(ctx context.Context, node string, handle func(payload []byte)) error
}

// Keys holds the publishers' idempotency keys.
type Keys interface {
	// Publisher idempotency. ClaimKey reserves key for ttl on behalf of a
	// request whose body has fingerprint fp and whose message would get
	// id. The first caller gets Claimed with ID = id; a caller with another
	// fp gets Conflict; a caller with the same fp gets the stored answer,
	// or neither while the first call is in progress. StoreKey records the
	// answer of a claimed key. ReleaseKey marks a claim whose call failed:
	// the key keeps its fp and message id, and the next ClaimKey with that
	// fp claims it again with the first ID (so that a retry republishes
	// the same message; an inbox append with the same Key finds it stored).
	// A claim still pending ClaimLease after it was made (its caller's
	// reply was lost, or its node died mid-publish) is taken over the same
	// way by the next ClaimKey with that fp.
	ClaimKey(ctx context.Context, key, fp, id string, ttl time.Duration) (KeyClaim, error)
	StoreKey(ctx context.Context, key string, answer []byte, ttl time.Duration) error
	ReleaseKey(ctx context.Context, key string) error
}

// Backend is everything a gateway node needs from the cluster: every
// role, and the backend's own life.
type Backend interface {
	NodeRegistry
	Routes
	Rooms
	Inbox
	History
	Bus
	Keys

	// Ping checks that the backend answers.
	Ping(ctx context.Context) error
	Close() error
}
