package cluster

// Redis key layout. P is RedisOptions.Prefix. Every key sits inside a hash
// tag ({...}) that starts with P, so two deployments with different
// prefixes never share a key, and every multi-key script of Redis Cluster
// touches one slot:
//
//	{P:u:USER}:routes     hash  conn id -> "node|connectedAtMs|expiresAtMs"
//	                            ("...|device" after it for a named device);
//	                            key PEXPIRE ttl+slack (GC only: readers skip
//	                            and lazily HDEL expired fields)
//	{P:u:USER}:seq        string, last seq assigned (INCR)
//	{P:u:USER}:ack        string, seq acknowledged by every device
//	{P:u:USER}:devices    hash  device -> "ackedSeq|lastSeenMs", at most
//	                            MaxDevices fields; key PEXPIRE as seq
//	{P:u:USER}:inbox      zset  score = seq, member = "seq:expiresAtMs:" + payload
//	                            (expiresAtMs 0 = never); key PEXPIRE inbox TTL
//	{P:u:USER}:rooms      set   rooms the user joined
//	{P:r:ROOM}:members    set   users in the room
//	{P:r:ROOM}:joins      hash  member -> the room's seq when the membership
//	                            was stored (JoinSeqs)
//	{P:r:ROOM}:nodes      hash  node -> expiresAtMs (room interest);
//	                            key PEXPIRE ttl+slack (GC only)
//	{P:r:ROOM}:seq        string, last seq of a reliable room (INCR); lives
//	                            max(history TTL, 7 days) after the last append
//	{P:r:ROOM}:hist       zset  history of a reliable room, as the inbox:
//	                            score = seq, member = "seq:expiresAtMs:" +
//	                            payload; key PEXPIRE history TTL
//	{P:r:ROOM}:confirm    string, as {P:u:USER}:confirm for history reads
//	{P:r:ROOM}:idem:KEY   string seq that the room append with idempotency
//	                            key KEY stored (RoomAppend.Key); PX KeyLifetime
//	{P:u:USER}:idem:KEY   string seq that the append with idempotency key
//	                            KEY stored (InboxAppend.Key); PX KeyLifetime
//	{P:idem:KEY}:claim    hash  publisher idempotency key (ClaimKey): s =
//	                            state (p pending, f failed, a answered), f =
//	                            body fingerprint, i = message id, a = answer
//	{P:nodes}:index       set   ids of registered nodes
//	{P:nodes}:n:ID        hash  NodeInfo fields; key PEXPIRE NodeTTL
//	{P:nodes}:rooms:ID    set   rooms node ID declared interest in;
//	                            key PEXPIRE ttl+slack
//
// Bus channels (not keys): P:bus:node:ID and P:bus:all. In Redis Cluster
// every classic PUBLISH goes through the master of the slot of "{P:bus}",
// so that one publisher's messages stay in order (see Redis.publisher);
// the sharded channels {TAG}:node:ID and {TAG}:all (TAG the hash tag of
// node ID's bucket, see shardBus) take SPUBLISH. A node record written on
// Redis Cluster also has bus=sharded.
//
// The per-user keys share one slot, so AppendInbox, ReadInbox and Ack are
// single scripts; so do one room's keys, so a room append (seq, history,
// trim, interested nodes) is one script too. A user's rooms and a room's members are two slots: joins
// and leaves are two commands, not atomic together (a crash between them
// leaves the user in one of the two sets; repeating the call repairs it).
type redisKeys struct{ p string }

func (k redisKeys) user(user, kind string) string { return "{" + k.p + ":u:" + user + "}:" + kind }
func (k redisKeys) routes(user string) string     { return k.user(user, "routes") }
func (k redisKeys) seq(user string) string        { return k.user(user, "seq") }
func (k redisKeys) ack(user string) string        { return k.user(user, "ack") }
func (k redisKeys) inbox(user string) string      { return k.user(user, "inbox") }
func (k redisKeys) devices(user string) string    { return k.user(user, "devices") }
func (k redisKeys) userRooms(user string) string  { return k.user(user, "rooms") }

// confirm is written before a WAIT that confirms what a read saw (see
// Redis.confirmReplicated); it holds nothing of use.
func (k redisKeys) confirm(user string) string { return k.user(user, "confirm") }

func (k redisKeys) userIdem(user, key string) string { return k.user(user, "idem:"+key) }

func (k redisKeys) idem(key string) string { return "{" + k.p + ":idem:" + key + "}:claim" }

func (k redisKeys) roomMembers(room string) string { return "{" + k.p + ":r:" + room + "}:members" }
func (k redisKeys) roomJoins(room string) string   { return "{" + k.p + ":r:" + room + "}:joins" }
func (k redisKeys) roomNodes(room string) string   { return "{" + k.p + ":r:" + room + "}:nodes" }
func (k redisKeys) roomSeq(room string) string     { return "{" + k.p + ":r:" + room + "}:seq" }
func (k redisKeys) roomHist(room string) string    { return "{" + k.p + ":r:" + room + "}:hist" }
func (k redisKeys) roomConfirm(room string) string { return "{" + k.p + ":r:" + room + "}:confirm" }
func (k redisKeys) roomIdem(room, key string) string {
	return "{" + k.p + ":r:" + room + "}:idem:" + key
}

func (k redisKeys) nodeIndex() string          { return "{" + k.p + ":nodes}:index" }
func (k redisKeys) nodePrefix() string         { return "{" + k.p + ":nodes}:n:" }
func (k redisKeys) node(id string) string      { return k.nodePrefix() + id }
func (k redisKeys) nodeRooms(id string) string { return "{" + k.p + ":nodes}:rooms:" + id }
func (k redisKeys) busNode(id string) string   { return k.p + ":bus:node:" + id }
func (k redisKeys) busAll() string             { return k.p + ":bus:all" }

// busRoute is not a key: its slot picks the Redis Cluster node that every
// PUBLISH goes through (see Redis.publish).
func (k redisKeys) busRoute() string { return "{" + k.p + ":bus}" }
