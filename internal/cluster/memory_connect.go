package cluster

import (
	"context"
	"time"
)

// Connect implements Backend as AddRoutes, UserRooms and ReadInbox.
func (m *Memory) Connect(ctx context.Context, route Route, ttl time.Duration, since int64, opt InboxOptions) (ConnectResult, error) {
	if err := m.AddRoutes(ctx, []Route{route}, ttl); err != nil {
		return ConnectResult{}, err
	}
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
