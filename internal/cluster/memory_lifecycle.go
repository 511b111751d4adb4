package cluster

import (
	"context"
	"slices"
	"sync"
	"time"
)

var _ Lifecycle = (*Memory)(nil)

// memLife is Memory's Lifecycle state, under its own lock (each method is
// one atomic step, as the Redis scripts are).
type memLife struct {
	mu    sync.Mutex
	live  map[string]map[string]memLive // user -> conn id -> live connection
	ended map[string]memEnded           // user + "\n" + conn id -> the claim
	v     map[string]int64              // user -> presence counter
	due   map[Due]time.Time             // check -> when it is due (again)
	acked map[string]int64
}

type memLive struct {
	route  Route
	online int64
}

type memEnded struct {
	claimer string
	end     ConnEnd
	at      time.Time
}

func (m *Memory) life() *memLife {
	m.lifeOnce.Do(func() {
		m.lc = &memLife{live: map[string]map[string]memLive{}, ended: map[string]memEnded{},
			v: map[string]int64{}, due: map[Due]time.Time{}, acked: map[string]int64{}}
	})
	return m.lc
}

// ConnUp implements Lifecycle.
func (m *Memory) ConnUp(ctx context.Context, route Route) (int64, error) {
	l := m.life()
	l.mu.Lock()
	defer l.mu.Unlock()
	conns := l.live[route.User]
	if c, ok := conns[route.ConnID]; ok {
		return c.online, nil
	}
	if _, ok := l.ended[route.User+"\n"+route.ConnID]; ok {
		return 0, nil // ended already (a late retry)
	}
	if conns == nil {
		conns = map[string]memLive{}
		l.live[route.User] = conns
	}
	var online int64
	if len(conns) == 0 {
		l.v[route.User]++
		online = l.v[route.User]
	}
	conns[route.ConnID] = memLive{route: route, online: online}
	return online, nil
}

// ConnDown implements Lifecycle.
func (m *Memory) ConnDown(ctx context.Context, user, connID, claimer string) (ConnEnd, error) {
	l := m.life()
	l.mu.Lock()
	defer l.mu.Unlock()
	key := user + "\n" + connID
	if e, ok := l.ended[key]; ok {
		if e.claimer == claimer {
			return e.end, nil
		}
		return ConnEnd{}, nil
	}
	c, ok := l.live[user][connID]
	if !ok {
		return ConnEnd{}, nil
	}
	delete(l.live[user], connID)
	end := ConnEnd{Claimed: true, Route: c.route}
	if len(l.live[user]) == 0 {
		delete(l.live, user)
		l.v[user]++
		end.Offline = l.v[user]
	}
	now := time.Now()
	if len(l.ended) >= 10_000 {
		// Claims are kept endedTTL, as in Redis.
		for k, e := range l.ended {
			if now.Sub(e.at) > endedTTL {
				delete(l.ended, k)
			}
		}
	}
	l.ended[key] = memEnded{claimer: claimer, end: end, at: now}
	return end, nil
}

// NodeConns implements Lifecycle.
func (m *Memory) NodeConns(ctx context.Context, node string) ([]Route, error) {
	l := m.life()
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []Route
	for _, conns := range l.live {
		for _, c := range conns {
			if c.route.Node == node {
				out = append(out, c.route)
			}
		}
	}
	return out, nil
}

// DropNodeConns implements Lifecycle (Memory keeps no per-node list).
func (m *Memory) DropNodeConns(ctx context.Context, node string) error { return nil }

// LifecycleNodes implements Lifecycle.
func (m *Memory) LifecycleNodes(ctx context.Context) ([]string, error) {
	l := m.life()
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for _, conns := range l.live {
		for _, c := range conns {
			if !slices.Contains(out, c.route.Node) {
				out = append(out, c.route.Node)
			}
		}
	}
	return out, nil
}

// AddDue implements Lifecycle.
func (m *Memory) AddDue(ctx context.Context, ds ...Due) error {
	l := m.life()
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, d := range ds {
		d.Acked = 0
		l.due[d] = time.UnixMilli(d.Due)
	}
	return nil
}

// ClaimDue implements Lifecycle.
func (m *Memory) ClaimDue(ctx context.Context, now time.Time, lease time.Duration, max int) ([]Due, error) {
	l := m.life()
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []Due
	for d, at := range l.due {
		if len(out) == max {
			break
		}
		if !at.After(now) {
			l.due[d] = now.Add(lease)
			c := d
			c.Acked = l.acked[d.User]
			out = append(out, c)
		}
	}
	slices.SortFunc(out, func(a, b Due) int { return int(a.Due - b.Due) })
	return out, nil
}

// DoneDue implements Lifecycle.
func (m *Memory) DoneDue(ctx context.Context, d Due) error {
	l := m.life()
	l.mu.Lock()
	defer l.mu.Unlock()
	d.Acked = 0
	delete(l.due, d)
	return nil
}

// Acked implements Lifecycle.
func (m *Memory) Acked(ctx context.Context, user string, seq int64) error {
	l := m.life()
	l.mu.Lock()
	defer l.mu.Unlock()
	l.acked[user] = max(l.acked[user], seq)
	return nil
}
