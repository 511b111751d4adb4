package cluster

import (
	"context"
	"slices"
	"time"
)

// Connect implements Backend as AddRoutes, UserRooms and ReadInbox, under
// one lock.
func (m *Memory) Connect(ctx context.Context, route Route, ttl time.Duration, since int64, opt InboxOptions, lim ConnLimit) (ConnectResult, error) {
	if err := m.lock(ctx); err != nil {
		return ConnectResult{}, err
	}
	if lim.Max > 0 {
		n := 0
		for _, r := range m.liveRoutes(route.User) {
			if r.ConnID != route.ConnID && !slices.Contains(lim.IgnoreNodes, r.Node) {
				n++
			}
		}
		if n >= lim.Max {
			m.mu.Unlock()
			return ConnectResult{}, ErrConnLimit
		}
	}
	m.addRoutesLocked([]Route{route}, ttl)
	m.mu.Unlock()
	rooms, err := m.UserRooms(ctx, route.User)
	if err != nil {
		return ConnectResult{}, err
	}
	in, err := m.ReadInbox(ctx, route.User, since, opt)
	if err != nil {
		return ConnectResult{}, err
	}
	return ConnectResult{Rooms: rooms, Inbox: in}, nil
}

// RemoveRoutes implements Backend.
func (m *Memory) RemoveRoutes(ctx context.Context, routes []Route) error {
	for _, r := range routes {
		if err := m.RemoveRoute(ctx, r.User, r.ConnID); err != nil {
			return err
		}
	}
	return nil
}
