package gateway

import (
	"cmp"
	"slices"
	"sync"
	"time"
)

// A membership made on another node reaches this one by a bus message
// only (changeMembership). One lost with a bus subscription would leave
// the member's connections here outside the room for as long as they
// live: a reconnect does not repair it either, since a client that never
// saw the room asks for no room_since. So after every loss notice the node
// reads the rooms of its local users again (membershipsOnce, before the
// rooms check of catchUpBehindOnce) and follows those it missed.

// membershipsOnce compares the rooms of each local user with the backend's
// and follows the rooms the local index misses: the member streams start
// at the room's seq at the join (JoinSeqs), before the index has the
// member (see followLocal), and the rooms check that follows fetches from
// the history what came after it. A user with a membership change in
// flight here, or whose rooms change meanwhile, is left alone: that change
// brings the index up to date. It reads at most 32 users at a time.
func (n *Node) membershipsOnce() error {
	snaps := n.hub.memberSnaps()
	sem := make(chan struct{}, 32)
	var (
		wg    sync.WaitGroup
		errMu sync.Mutex
		first error
	)
	for _, s := range snaps {
		if n.ctx.Err() != nil {
			break
		}
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			if err := n.convergeUser(s); err != nil {
				errMu.Lock()
				first = cmp.Or(first, err)
				errMu.Unlock()
			}
		}()
	}
	wg.Wait()
	return first
}

// convergeUser follows the rooms of one local user that the index misses.
func (n *Node) convergeUser(s memberSnap) error {
	ctx, cancel := n.bctx(n.ctx)
	defer cancel()
	start := time.Now()
	rooms, err := n.backend.UserRooms(ctx, s.user)
	n.observe("rooms", start, err)
	if err != nil {
		return err
	}
	var missed []string
	for _, r := range rooms {
		if !slices.Contains(s.rooms, r) {
			missed = append(missed, r)
		}
	}
	if len(missed) == 0 {
		return nil
	}
	start = time.Now()
	seqs, err := n.backend.JoinSeqs(ctx, s.user, missed)
	n.observe("rooms", start, err)
	if err != nil {
		return err
	}
	var added []string
	for i, room := range missed {
		// -1: left since UserRooms read it, or joined through a node of
		// an earlier version (which records no join seq): not followed.
		if seqs[i] < 0 || !n.hub.unchanged(s) {
			continue
		}
		created := n.followNew(s.user, room, seqs[i])
		add, ok := n.hub.joinIfUnchanged(s, room)
		if !ok {
			// The user's rooms changed meanwhile: that change decides.
			n.dropUntouched(created)
			return nil
		}
		n.log.Info("room membership missed on the bus followed", "user", s.user, "room", room, "join_seq", seqs[i])
		if add {
			added = append(added, room)
		}
	}
	if len(added) > 0 {
		return n.declareInterestCtx(ctx, added)
	}
	return nil
}

// newStream is a stream followNew started.
type newStream struct {
	c *conn
	s *stream
}

// followNew is followLocal (no join frame) that returns the streams it
// started.
func (n *Node) followNew(user, room string, seq int64) []newStream {
	if seq <= 0 {
		return nil
	}
	var out []newStream
	for _, c := range n.hub.userConns(user) {
		c.mu.Lock()
		if c.sess.Stream(room) == nil {
			out = append(out, newStream{c, c.sess.Follow(room, seq)})
		}
		c.mu.Unlock()
	}
	return out
}

// dropUntouched forgets the streams followNew started that nothing moved.
func (n *Node) dropUntouched(created []newStream) {
	for _, ns := range created {
		c := ns.c
		c.mu.Lock()
		c.sess.DropUntouched(ns.s)
		c.mu.Unlock()
	}
}
