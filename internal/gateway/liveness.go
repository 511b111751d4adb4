package gateway

import (
	"context"
	"sync"
	"time"

	"github.com/wsgate/wsgate/internal/cluster"
)

// liveBackend is the cluster backend as the node uses it: every route it
// answers (UserRoutes, UsersRoutes, the routes of an inbox append) leaves
// out the routes of dead nodes, so that presence, publish's online, the
// per-user connection limit and the single device policy never count a
// connection of a node that stopped. A node is dead when its heartbeat is
// older than three heartbeat intervals, or when its record is gone from a
// node list read after the route was made. The routes left out are
// removed (they would otherwise count elsewhere until the route TTL).
//
// The judgement uses the node list as last read (by cleanupDeadNodes, or
// when a route of a node that looks dead is seen): a verdict of "dead"
// from a list older than one heartbeat interval is not trusted; the route
// counts this time and the list is read again, at most once per interval.
type liveBackend struct {
	cluster.Backend
	n *Node

	mu         sync.Mutex
	read       time.Time        // when the node list was read (zero: never)
	beats      map[string]int64 // node id -> its heartbeat (Unix ms) as read
	tried      time.Time        // when a read was last started for a suspect
	refreshing bool
}

// UserRoutes implements cluster.Backend.
func (l *liveBackend) UserRoutes(ctx context.Context, user string) ([]cluster.Route, error) {
	routes, err := l.Backend.UserRoutes(ctx, user)
	return l.live(routes), err
}

// UsersRoutes implements cluster.Backend.
func (l *liveBackend) UsersRoutes(ctx context.Context, users []string) ([][]cluster.Route, error) {
	all, err := l.Backend.UsersRoutes(ctx, users)
	for i := range all {
		all[i] = l.live(all[i])
	}
	return all, err
}

// allUserRoutes and allUsersRoutes are the routes without the liveness
// filter: a message goes to every route's node (a node that is only late
// with its heartbeat, after a Redis blip, still gets it; a dead node's
// channel has no listener), while what counts (online, presence, limits)
// is the live ones. The routes of an inbox append are unfiltered too.
func (l *liveBackend) allUserRoutes(ctx context.Context, user string) ([]cluster.Route, error) {
	return l.Backend.UserRoutes(ctx, user)
}

func (l *liveBackend) allUsersRoutes(ctx context.Context, users []string) ([][]cluster.Route, error) {
	return l.Backend.UsersRoutes(ctx, users)
}

// Connect implements cluster.Backend: the connection limit does not count
// routes of the nodes known dead.
func (l *liveBackend) Connect(ctx context.Context, route cluster.Route, ttl time.Duration, since int64, opt cluster.InboxOptions, lim cluster.ConnLimit) (cluster.ConnectResult, error) {
	if lim.Max > 0 {
		lim.IgnoreNodes = append(lim.IgnoreNodes, l.deadNodes()...)
	}
	return l.Backend.Connect(ctx, route, ttl, since, opt, lim)
}

// deadNodes lists the nodes of the last node list whose heartbeat is
// older than three intervals (when that list is recent enough to trust).
func (l *liveBackend) deadNodes() []string {
	now := time.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for id, hb := range l.beats {
		if id != l.n.cfg.NodeID && now.UnixMilli()-hb > l.n.staleAfter().Milliseconds() {
			out = append(out, id)
		}
	}
	if len(out) > 0 && now.Sub(l.read) >= l.n.cfg.HeartbeatInterval {
		// Not to be trusted: count them this time, and read the list.
		l.refreshLocked(now)
		return nil
	}
	return out
}

// Nodes implements cluster.Backend, and keeps the list for judging routes.
func (l *liveBackend) Nodes(ctx context.Context) ([]cluster.NodeInfo, error) {
	start := time.Now()
	nodes, err := l.Backend.Nodes(ctx)
	if err == nil {
		beats := make(map[string]int64, len(nodes))
		for _, x := range nodes {
			beats[x.ID] = x.Heartbeat
		}
		l.mu.Lock()
		l.read, l.beats = start, beats
		l.mu.Unlock()
	}
	return nodes, err
}

// live returns routes without those of dead nodes, and queues the removal
// of the routes it leaves out.
func (l *liveBackend) live(routes []cluster.Route) []cluster.Route {
	var out []cluster.Route
	for i, r := range routes {
		dead, gone := l.dead(r)
		if gone {
			l.n.removeRoute(r)
		}
		if !dead {
			if out != nil {
				out = append(out, r)
			}
			continue
		}
		if out == nil {
			out = append(make([]cluster.Route, 0, len(routes)), routes[:i]...)
		}
	}
	if out == nil {
		return routes
	}
	return out
}

// dead reports whether r is on a dead node (it does not count), and gone
// whether that node is gone for good, so that the route is removed: its
// heartbeat is older than the age at which survivors remove its record
// (goneAfter), or its record is absent from a list read after the route
// was made. A node whose heartbeat is only a few intervals late (every
// node's is, just after a Redis restart) does not count meanwhile, but
// keeps its routes: it is probably coming back.
func (l *liveBackend) dead(r cluster.Route) (dead, gone bool) {
	if r.Node == l.n.cfg.NodeID {
		return false, false
	}
	interval := l.n.cfg.HeartbeatInterval
	now := time.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	hb, known := l.beats[r.Node]
	if known {
		age := now.UnixMilli() - hb
		dead = age > l.n.staleAfter().Milliseconds()
		gone = age > l.n.goneAfter().Milliseconds()
	} else {
		// Absent from a list read after the route was made: a node
		// registers before it takes connections, so the node is gone.
		dead = !l.read.IsZero() && r.ConnectedAt < l.read.Add(-interval).UnixMilli()
		gone = dead
	}
	if (dead || !known) && now.Sub(l.read) >= interval {
		l.refreshLocked(now)
		return false, false
	}
	return dead, gone
}

// refreshLocked reads the node list again in the background, at most once
// per interval.
func (l *liveBackend) refreshLocked(now time.Time) {
	if !l.refreshing && now.Sub(l.tried) >= l.n.cfg.HeartbeatInterval {
		l.refreshing, l.tried = true, now
		l.n.goFunc(l.refresh)
	}
}

func (l *liveBackend) refresh() {
	ctx, cancel := context.WithTimeout(l.n.ctx, 2*time.Second)
	defer cancel()
	_, _ = l.Nodes(ctx)
	l.mu.Lock()
	l.refreshing = false
	l.mu.Unlock()
}
