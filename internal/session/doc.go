// Package session is the sequencing core of one connection: the
// positions of its reliable streams (the user's inbox and each reliable
// room it follows), the live messages held while it resumes or while a
// stream catches up, and the catch-up that fills a stream's sequence from
// the inbox or a room's history (contract 4.3 and 12). It knows nothing
// of sockets, of the backend or of the node: a Driver, the connection
// that owns the session, queues what the session emits and runs the reads
// it asks for.
//
// A reliable stream's position is the highest seq queued for the socket,
// which nothing else moves. A live message at or below it is a
// duplicate and is dropped; the next one is queued if the send queue has
// room; anything else (a seq beyond the next: a message still on its way
// or lost by the bus; a full queue) puts the stream into catch-up: later
// live messages of the stream are held, the driver reads the stream from
// its position (Advance answers Read), hands the read back (Apply), and
// Advance queues in seq order the messages read, a gap for what was
// trimmed, then the held ones, as the queue has room. So on one
// connection each stream's seqs are strictly increasing, without a
// duplicate, and every seq above the start is either queued or covered by
// one gap frame.
//
// The events:
//
//   - Deliver: a live reliable message of an open connection (Full: the
//     queue had no room for it; the driver applies the message's class,
//     closing the connection or calling Defer);
//   - Hold and Release: the live messages that arrive while the
//     connection resumes, then queued in arrival order after the replays
//     (ResumeInbox, ResumeRoom);
//   - Advance, Apply, Touch: the catch-up of one stream, run by the
//     driver (Driver.CatchUp starts it, Resync asks for one);
//   - Follow, Forget, DropUntouched: the rooms followed (a join, a
//     leave);
//   - Close: nothing is emitted after it.
//
// A Session is not safe for concurrent use: the driver calls it under the
// connection's lock, and the Driver's methods are called under it too.
// Its zero value is an idle session; it allocates only once a stream
// catches up, a room is followed or a message is held, and Compact lets
// that go again.
package session
