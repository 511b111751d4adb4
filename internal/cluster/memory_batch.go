package cluster

import (
	"context"
	"slices"
)

// AppendInboxes implements Backend: AppendInbox for each message, in order.
func (m *Memory) AppendInboxes(ctx context.Context, msgs []InboxAppend, opt InboxOptions) []AppendOutcome {
	out := make([]AppendOutcome, len(msgs))
	if err := m.lock(ctx); err != nil {
		for i := range out {
			out[i].Err = err
		}
		return out
	}
	defer m.mu.Unlock()
	for i, msg := range msgs {
		out[i].AppendResult = m.appendLocked(msg, opt)
	}
	return out
}

// UsersRoutes implements Backend.
func (m *Memory) UsersRoutes(ctx context.Context, users []string) ([][]Route, error) {
	if err := m.lock(ctx); err != nil {
		return nil, err
	}
	defer m.mu.Unlock()
	out := make([][]Route, len(users))
	for i, u := range users {
		out[i] = m.liveRoutes(u)
	}
	return out, nil
}

// SendEach implements Backend: each payload to its node's subscriptions,
// in order.
func (m *Memory) SendEach(ctx context.Context, msgs []BusMessage) error {
	if err := m.lock(ctx); err != nil {
		return err
	}
	defer m.mu.Unlock()
	for _, msg := range msgs {
		for s := range m.subs[msg.Node] {
			s.push(slices.Clone(msg.Payload))
		}
	}
	return nil
}
