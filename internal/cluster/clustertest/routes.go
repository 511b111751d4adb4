package clustertest

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/wsgate/wsgate/internal/cluster"
)

var routeTests = []subtest{
	{"AddAndList", testRoutesAddAndList},
	{"EmptyBatchAndUnknownUser", testRoutesEmpty},
	{"LargeBatch", testRoutesLargeBatch},
	{"RefreshExtendsLifetime", testRoutesRefresh},
	{"RefreshMovesRoute", testRoutesMove},
	{"Expire", testRoutesExpire},
	{"RemoveOnlyThatConn", testRoutesRemoveOnlyThatConn},
	{"LateCloseOfOldConn", testRoutesLateClose},
	{"UnusualIDs", testRoutesUnusualIDs},
	{"ManyUsers", testRoutesManyUsers},
	{"Info", testRoutesInfo},
}

// sortRoutes orders routes by conn id, for comparisons.
func sortRoutes(rs []cluster.Route) []cluster.Route {
	rs = slices.Clone(rs)
	slices.SortFunc(rs, func(a, b cluster.Route) int { return strings.Compare(a.ConnID, b.ConnID) })
	return rs
}

// stored is r as a backend reads it back: a route stored without a device
// has the default one.
func stored(r cluster.Route) cluster.Route {
	if r.Device == "" {
		r.Device = cluster.DefaultDevice
	}
	return r
}

func checkRoutes(t *testing.T, what string, got []cluster.Route, want ...cluster.Route) {
	t.Helper()
	want = slices.Clone(want)
	for i := range want {
		want[i] = stored(want[i])
	}
	if g, w := sortRoutes(got), sortRoutes(want); !slices.Equal(g, w) {
		t.Fatalf("%s = %+v, want %+v", what, g, w)
	}
}

func routeConns(rs []cluster.Route) string {
	ids := make([]string, len(rs))
	for i, r := range rs {
		ids[i] = r.ConnID
	}
	return fmt.Sprint(ids)
}

func testRoutesAddAndList(t *testing.T, b cluster.Backend) {
	ctx := ctxFor(t)
	r1 := cluster.Route{User: "alice", ConnID: "c1", Node: "n1", ConnectedAt: 1_700_000_000_001}
	r2 := cluster.Route{User: "alice", ConnID: "c2", Node: "n2", ConnectedAt: 1_700_000_000_002}
	r3 := cluster.Route{User: "bob", ConnID: "c3", Node: "n1", ConnectedAt: 1_700_000_000_003}
	must(t, b.AddRoutes(ctx, []cluster.Route{r1, r2, r3}, longTTL))
	got, err := b.UserRoutes(ctx, "alice")
	must(t, err)
	checkRoutes(t, "UserRoutes(alice)", got, r1, r2)
	got, err = b.UserRoutes(ctx, "bob")
	must(t, err)
	checkRoutes(t, "UserRoutes(bob)", got, r3)
	// Adding the same route again changes nothing.
	must(t, b.AddRoutes(ctx, []cluster.Route{r1}, longTTL))
	got, err = b.UserRoutes(ctx, "alice")
	must(t, err)
	checkRoutes(t, "UserRoutes(alice) after re-add", got, r1, r2)
}

func testRoutesEmpty(t *testing.T, b cluster.Backend) {
	ctx := ctxFor(t)
	must(t, b.AddRoutes(ctx, nil, longTTL))
	got, err := b.UserRoutes(ctx, "nobody")
	must(t, err)
	if len(got) != 0 {
		t.Fatalf("UserRoutes(nobody) = %+v, want none", got)
	}
	must(t, b.RemoveRoute(ctx, "nobody", "c1"))
}

// A heartbeat refreshes every route of a node in one call.
func testRoutesLargeBatch(t *testing.T, b cluster.Backend) {
	ctx := ctxFor(t)
	const users, perUser = 1250, 2
	var routes []cluster.Route
	for u := range users {
		for c := range perUser {
			routes = append(routes, cluster.Route{
				User: fmt.Sprintf("u%d", u), ConnID: fmt.Sprintf("c%d-%d", u, c), Node: "n1", ConnectedAt: int64(u),
			})
		}
	}
	must(t, b.AddRoutes(ctx, routes, longTTL))
	for _, u := range []int{0, 617, users - 1} {
		got, err := b.UserRoutes(ctx, fmt.Sprintf("u%d", u))
		must(t, err)
		checkRoutes(t, fmt.Sprintf("UserRoutes(u%d)", u), got, routes[u*perUser:(u+1)*perUser]...)
	}
}

func testRoutesRefresh(t *testing.T, b cluster.Backend) {
	ctx := ctxFor(t)
	kept := cluster.Route{User: "alice", ConnID: "c1", Node: "n1", ConnectedAt: 1}
	control := cluster.Route{User: "bob", ConnID: "c2", Node: "n1", ConnectedAt: 2}
	must(t, b.AddRoutes(ctx, []cluster.Route{kept, control}, shortTTL))
	must(t, b.AddRoutes(ctx, []cluster.Route{kept}, longTTL))
	// Once the control route (added with kept, never refreshed) is gone,
	// kept would be gone too had the refresh not worked.
	eventually(t, "control route expires", func() (bool, string) {
		got, err := b.UserRoutes(ctx, "bob")
		must(t, err)
		return len(got) == 0, routeConns(got)
	})
	got, err := b.UserRoutes(ctx, "alice")
	must(t, err)
	checkRoutes(t, "refreshed UserRoutes(alice)", got, kept)
}

func testRoutesMove(t *testing.T, b cluster.Backend) {
	ctx := ctxFor(t)
	r := cluster.Route{User: "alice", ConnID: "c1", Node: "n1", ConnectedAt: 5}
	must(t, b.AddRoutes(ctx, []cluster.Route{r}, longTTL))
	r.Node = "n2"
	must(t, b.AddRoutes(ctx, []cluster.Route{r}, longTTL))
	got, err := b.UserRoutes(ctx, "alice")
	must(t, err)
	checkRoutes(t, "UserRoutes after overwrite", got, r)
}

func testRoutesExpire(t *testing.T, b cluster.Backend) {
	ctx := ctxFor(t)
	short := cluster.Route{User: "alice", ConnID: "c1", Node: "n1", ConnectedAt: 1}
	long := cluster.Route{User: "alice", ConnID: "c2", Node: "n2", ConnectedAt: 2}
	must(t, b.AddRoutes(ctx, []cluster.Route{short}, shortTTL))
	must(t, b.AddRoutes(ctx, []cluster.Route{long}, longTTL))
	got, err := b.UserRoutes(ctx, "alice")
	must(t, err)
	checkRoutes(t, "UserRoutes before expiry", got, short, long)
	eventually(t, "short route expires", func() (bool, string) {
		got, err := b.UserRoutes(ctx, "alice")
		must(t, err)
		return len(got) == 1 && got[0] == stored(long), routeConns(got)
	})
	// A user whose every route expired has none.
	must(t, b.AddRoutes(ctx, []cluster.Route{{User: "bob", ConnID: "c3", Node: "n1"}}, shortTTL))
	eventually(t, "bob's only route expires", func() (bool, string) {
		got, err := b.UserRoutes(ctx, "bob")
		must(t, err)
		return len(got) == 0, routeConns(got)
	})
}

func testRoutesRemoveOnlyThatConn(t *testing.T, b cluster.Backend) {
	ctx := ctxFor(t)
	r1 := cluster.Route{User: "alice", ConnID: "c1", Node: "n1", ConnectedAt: 1}
	r2 := cluster.Route{User: "alice", ConnID: "c2", Node: "n1", ConnectedAt: 2}
	r3 := cluster.Route{User: "bob", ConnID: "c1", Node: "n1", ConnectedAt: 3} // same conn id, other user
	must(t, b.AddRoutes(ctx, []cluster.Route{r1, r2, r3}, longTTL))
	must(t, b.RemoveRoute(ctx, "alice", "c1"))
	got, err := b.UserRoutes(ctx, "alice")
	must(t, err)
	checkRoutes(t, "UserRoutes(alice)", got, r2)
	got, err = b.UserRoutes(ctx, "bob")
	must(t, err)
	checkRoutes(t, "UserRoutes(bob)", got, r3)
	must(t, b.RemoveRoute(ctx, "alice", "c1")) // twice: no error
	must(t, b.RemoveRoute(ctx, "alice", "c2"))
	got, err = b.UserRoutes(ctx, "alice")
	must(t, err)
	checkRoutes(t, "UserRoutes(alice) after removing all", got)
}

// The field failure: a user reconnects (new conn on another node) and the
// old connection's deferred cleanup runs late. It must not remove the new
// route.
func testRoutesLateClose(t *testing.T, b cluster.Backend) {
	ctx := ctxFor(t)
	old := cluster.Route{User: "alice", ConnID: "old", Node: "n1", ConnectedAt: 1}
	must(t, b.AddRoutes(ctx, []cluster.Route{old}, longTTL))
	fresh := cluster.Route{User: "alice", ConnID: "new", Node: "n2", ConnectedAt: 2}
	must(t, b.AddRoutes(ctx, []cluster.Route{fresh}, longTTL))
	must(t, b.RemoveRoute(ctx, "alice", "old"))
	got, err := b.UserRoutes(ctx, "alice")
	must(t, err)
	checkRoutes(t, "UserRoutes after the late close", got, fresh)
}

// Ids may hold the characters an implementation might use as separators.
func testRoutesUnusualIDs(t *testing.T, b cluster.Backend) {
	ctx := ctxFor(t)
	r := cluster.Route{User: "a|b:{c}", ConnID: "c|1:{x}", Node: "node|1:{y}", ConnectedAt: 42}
	must(t, b.AddRoutes(ctx, []cluster.Route{r}, longTTL))
	got, err := b.UserRoutes(ctx, r.User)
	must(t, err)
	checkRoutes(t, "UserRoutes", got, r)
	res, err := b.AppendInbox(ctx, r.User, []byte("x"), cluster.InboxOptions{Limit: 10, TTL: longTTL})
	must(t, err)
	checkRoutes(t, "AppendInbox routes", res.Routes, r)
}

// UsersRoutes answers as UserRoutes per user, expired routes left out.
func testRoutesManyUsers(t *testing.T, b cluster.Backend) {
	ctx := ctxFor(t)
	got, err := b.UsersRoutes(ctx, nil)
	must(t, err)
	if len(got) != 0 {
		t.Fatalf("UsersRoutes of nobody = %+v", got)
	}
	r1 := cluster.Route{User: "alice", ConnID: "c1", Node: "n1", ConnectedAt: 1}
	r2 := cluster.Route{User: "alice", ConnID: "c2", Node: "n2", ConnectedAt: 2}
	r3 := cluster.Route{User: "bob", ConnID: "c3", Node: "n1", ConnectedAt: 3}
	short := cluster.Route{User: "carol", ConnID: "c4", Node: "n3", ConnectedAt: 4}
	must(t, b.AddRoutes(ctx, []cluster.Route{r1, r2, r3}, longTTL))
	must(t, b.AddRoutes(ctx, []cluster.Route{short}, shortTTL))
	users := []string{"bob", "nobody", "alice", "bob"}
	got, err = b.UsersRoutes(ctx, users)
	must(t, err)
	if len(got) != len(users) {
		t.Fatalf("%d answers for %d users", len(got), len(users))
	}
	checkRoutes(t, "bob", got[0], r3)
	checkRoutes(t, "nobody", got[1])
	checkRoutes(t, "alice", got[2], r1, r2)
	checkRoutes(t, "bob again", got[3], r3)
	eventually(t, "carol's route expires", func() (bool, string) {
		got, err := b.UsersRoutes(ctx, []string{"carol", "alice"})
		must(t, err)
		return len(got[0]) == 0 && len(got[1]) == 2, routeConns(got[0]) + routeConns(got[1])
	})
}

// A route's info (the token's info claim, for presence) is stored by
// Connect and AddRoutes, read back with the route, gone with it, and
// never taken for a route itself: not listed, not counted by a limit,
// also when it looks like one.
func testRoutesInfo(t *testing.T, b cluster.Backend) {
	ctx := ctxFor(t)
	tricky := `{"name":"a|1|99999999999999","n":2}`
	r1 := cluster.Route{User: "ines", ConnID: "c1", Node: "n1", ConnectedAt: 1, Info: tricky}
	r2 := cluster.Route{User: "ines", ConnID: "c2", Node: "n2", ConnectedAt: 2}
	must(t, b.AddRoutes(ctx, []cluster.Route{r1, r2}, longTTL))
	r3 := cluster.Route{User: "ines", ConnID: "c3", Node: "n1", ConnectedAt: 3, Info: `[1,2]`}
	if _, err := b.Connect(ctx, r3, longTTL, 0, cluster.InboxOptions{}, cluster.ConnLimit{Max: 3}); err != nil {
		t.Fatalf("connect with two other routes (one with info) under a limit of 3: %v", err)
	}
	got, err := b.UserRoutes(ctx, "ines")
	must(t, err)
	checkRoutes(t, "UserRoutes(ines)", got, r1, r2, r3)
	r4 := cluster.Route{User: "ines", ConnID: "c4", Node: "n1", ConnectedAt: 4}
	if _, err := b.Connect(ctx, r4, longTTL, 0, cluster.InboxOptions{}, cluster.ConnLimit{Max: 4}); err != nil {
		t.Fatalf("connect with three other routes (two with info) under a limit of 4: %v", err)
	}
	must(t, b.RemoveRoute(ctx, "ines", "c1"))
	r1.Info, r1.Node = "", "n3" // the same id again, without info
	must(t, b.AddRoutes(ctx, []cluster.Route{r1}, longTTL))
	got, err = b.UserRoutes(ctx, "ines")
	must(t, err)
	checkRoutes(t, "UserRoutes(ines) after c1 came back without info", got, r1, r2, r3, r4)
}
