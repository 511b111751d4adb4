package cluster

import (
	"context"
	"slices"
	"time"
)

// Connect implements Backend as AddRoutes, UserRooms and ReadInbox, under
// one lock, marking the route's device seen.
func (m *Memory) Connect(ctx context.Context, route Route, ttl time.Duration, since int64, opt InboxOptions, lim ConnLimit) (ConnectResult, error) {
	if err := m.lock(ctx); err != nil {
		return ConnectResult{}, err
	}
	defer m.mu.Unlock()
	if lim.Max > 0 {
		n := 0
		for _, r := range m.liveRoutes(route.User) {
			if r.ConnID != route.ConnID && !slices.Contains(lim.IgnoreNodes, r.Node) {
				n++
			}
		}
		if n >= lim.Max {
			return ConnectResult{}, ErrConnLimit
		}
	}
	m.addRoutesLocked([]Route{route}, ttl)
	rooms := sortedKeys(m.rooms[route.User])
	in := m.inboxes[route.User]
	if in == nil {
		// Even before the first message: the device must hold back what
		// another device acknowledges later.
		in = &memInbox{}
		m.inboxes[route.User] = in
	}
	now := m.now()
	d := in.seeDevice(deviceOf(route.Device), now, opt, true)
	if since < 0 {
		since = d.acked
	}
	return ConnectResult{Rooms: rooms, Inbox: in.read(now, since, d.acked, opt)}, nil
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
