package fleet

import (
	"context"
	"sync"
	"time"

	"github.com/wsgate/wsgate/internal/cluster"
)

// Liveness is the cluster backend as a node uses it: every route it
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
type Liveness struct {
	cluster.Backend
	o LivenessOptions

	mu         sync.Mutex
	read       time.Time        // when the node list was read (zero: never)
	beats      map[string]int64 // node id -> its heartbeat (Unix ms) as read
	tried      time.Time        // when a read was last started for a suspect
	refreshing bool
}

// LivenessOptions configure a Liveness.
type LivenessOptions struct {
	Self     string        // this node's id: its own routes always count
	Interval time.Duration // WSGATE_HEARTBEAT_INTERVAL
	RouteTTL time.Duration // WSGATE_ROUTE_TTL
	// Remove queues the removal of a route of a node gone for good.
	Remove func(cluster.Route)
	// Go runs a read of the node list in the background (false: the
	// node is shutting down, f was not started); Ctx bounds it.
	Go  func(f func()) bool
	Ctx context.Context
}

// NewLiveness is b with the routes of dead nodes left out.
func NewLiveness(b cluster.Backend, o LivenessOptions) *Liveness {
	return &Liveness{Backend: b, o: o}
}

// StaleAfter is when a node whose heartbeat stopped is skipped by the
// allocator and left out of the node list, and its routes stop counting.
func StaleAfter(interval time.Duration) time.Duration { return 3 * interval }

// GoneAfter is when a node whose heartbeat stopped is gone for good: its
// record, room interest and routes are removed.
func GoneAfter(interval, routeTTL time.Duration) time.Duration {
	return max(routeTTL, 10*interval)
}

// UserRoutes implements cluster.Backend.
func (l *Liveness) UserRoutes(ctx context.Context, user string) ([]cluster.Route, error) {
	routes, err := l.Backend.UserRoutes(ctx, user)
	return l.Live(routes), err
}

// UsersRoutes implements cluster.Backend.
func (l *Liveness) UsersRoutes(ctx context.Context, users []string) ([][]cluster.Route, error) {
	all, err := l.Backend.UsersRoutes(ctx, users)
	for i := range all {
		all[i] = l.Live(all[i])
	}
	return all, err
}

// AllUserRoutes and AllUsersRoutes are the routes without the liveness
// filter: a message goes to every route's node (a node that is only late
// with its heartbeat, after a Redis blip, still gets it; a dead node's
// channel has no listener), while what counts (online, presence, limits)
// is the live ones. The routes of an inbox append are unfiltered too.
func (l *Liveness) AllUserRoutes(ctx context.Context, user string) ([]cluster.Route, error) {
	return l.Backend.UserRoutes(ctx, user)
}

func (l *Liveness) AllUsersRoutes(ctx context.Context, users []string) ([][]cluster.Route, error) {
	return l.Backend.UsersRoutes(ctx, users)
}

// Connect implements cluster.Backend: the connection limit does not count
// routes of the nodes known dead.
func (l *Liveness) Connect(ctx context.Context, route cluster.Route, ttl time.Duration, since int64, opt cluster.InboxOptions, lim cluster.ConnLimit) (cluster.ConnectResult, error) {
	if lim.Max > 0 {
		lim.IgnoreNodes = append(lim.IgnoreNodes, l.deadNodes()...)
	}
	return l.Backend.Connect(ctx, route, ttl, since, opt, lim)
}

// deadNodes lists the nodes of the last node list whose heartbeat is
// older than three intervals (when that list is recent enough to trust).
func (l *Liveness) deadNodes() []string {
	now := time.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for id, hb := range l.beats {
		if id != l.o.Self && now.UnixMilli()-hb > StaleAfter(l.o.Interval).Milliseconds() {
			out = append(out, id)
		}
	}
	if len(out) > 0 && now.Sub(l.read) >= l.o.Interval {
		// Not to be trusted: count them this time, and read the list.
		l.refreshLocked(now)
		return nil
	}
	return out
}

// Nodes implements cluster.Backend, and keeps the list for judging routes.
func (l *Liveness) Nodes(ctx context.Context) ([]cluster.NodeInfo, error) {
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

// Live returns routes without those of dead nodes, and queues the removal
// of the routes it leaves out (those of nodes gone for good).
func (l *Liveness) Live(routes []cluster.Route) []cluster.Route {
	var out []cluster.Route
	for i, r := range routes {
		dead, gone := l.dead(r)
		if gone {
			l.o.Remove(r)
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
func (l *Liveness) dead(r cluster.Route) (dead, gone bool) {
	if r.Node == l.o.Self {
		return false, false
	}
	interval := l.o.Interval
	now := time.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	hb, known := l.beats[r.Node]
	if known {
		age := now.UnixMilli() - hb
		dead = age > StaleAfter(l.o.Interval).Milliseconds()
		gone = age > GoneAfter(l.o.Interval, l.o.RouteTTL).Milliseconds()
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
func (l *Liveness) refreshLocked(now time.Time) {
	if !l.refreshing && now.Sub(l.tried) >= l.o.Interval {
		l.refreshing, l.tried = true, now
		l.o.Go(l.refresh)
	}
}

func (l *Liveness) refresh() {
	ctx, cancel := context.WithTimeout(l.o.Ctx, 2*time.Second)
	defer cancel()
	_, _ = l.Nodes(ctx)
	l.mu.Lock()
	l.refreshing = false
	l.mu.Unlock()
}
