package cluster_test

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/wsgate/wsgate/internal/cluster"
	"github.com/wsgate/wsgate/internal/testutil/redistest"
)

// A join that stopped after the user's side (a crash between the two
// slots) leaves the room counted for the user; repeating the join at the
// limit is accepted and completes the room's side.
func TestRedisJoinRoomRepairsAHalfJoin(t *testing.T) {
	t.Parallel()
	s := redistest.Standalone(t, redistest.Options{})
	b := newRedis(t, s.URL(), func(o *cluster.RedisOptions) { o.Prefix = "halfjoin" })
	ctx := ctxTimeout(t, time.Minute)
	if _, err := b.JoinRoom(ctx, "a", "u", 2); err != nil {
		t.Fatal(err)
	}
	if err := s.Client().SAdd(ctx, "{halfjoin:u:u}:rooms", "b").Err(); err != nil {
		t.Fatal(err)
	}
	if _, err := b.JoinRoom(ctx, "c", "u", 2); !errors.Is(err, cluster.ErrRoomLimit) {
		t.Fatalf("join of a third room with the half-joined one counted: %v, want ErrRoomLimit", err)
	}
	if _, err := b.JoinRoom(ctx, "b", "u", 2); err != nil {
		t.Fatalf("repeated join of the half-joined room at the limit: %v", err)
	}
	if m, err := b.RoomMembers(ctx, "b"); err != nil || !slices.Equal(m, []string{"u"}) {
		t.Fatalf("members(b) after the repeated join: %v %v", m, err)
	}
	if m, err := b.RoomMembers(ctx, "c"); err != nil || len(m) != 0 {
		t.Fatalf("members of the refused room: %v %v", m, err)
	}
}
