package bench

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
)

const (
	joinSecret = "bench-test-secret-0123456789abcdef"
	joinAPIKey = "bench-test-key-0123456789"
)

// roomMembers asks the node's API for the members of room.
func roomMembers(t *testing.T, g *gateway, room string) []string {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, "http://"+g.addr+"/api/v1/rooms/"+room+"/members", nil)
	req.Header.Set("Authorization", "Bearer "+joinAPIKey)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var body struct {
		Members []string `json:"members"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("members of %s: HTTP %d, %v", room, resp.StatusCode, err)
	}
	return body.Members
}

// TestConnectJoin: with --join every connection is a member of the room
// through its own join frame (the token's rooms claim allows it), and
// every join's reply was counted.
func TestConnectJoin(t *testing.T) {
	g := startGateway(t, "gateway", "WSGATE_JWT_SECRET="+joinSecret, "WSGATE_API_KEY="+joinAPIKey)
	res := runBench(t, "connect", "--url", g.wsURL(), "--conns", smokeConns, "--settle", "200ms",
		"--join", "bench", "--jwt-secret", joinSecret, "--api-key", joinAPIKey)
	checkCommon(t, res, 50)
	c := res.rep.Connections
	if c.JoinTime == nil || c.JoinTime.Count != 50 || c.ConnectTime.Count != 50 {
		t.Errorf("join replies %v, connect times %d; want 50 each", c.JoinTime, c.ConnectTime.Count)
	}
	if res.rep.Config.Join != "bench" || !strings.Contains(res.stdout, "connect+join time") || !strings.Contains(res.stdout, "CPU per connect+join") {
		t.Errorf("the report does not say the connections joined bench:\n%s", res.stdout)
	}
	if m := roomMembers(t, g, "bench"); len(m) != 50 {
		t.Errorf("room bench has %d members, want 50: %v", len(m), m)
	}
}

// TestBroadcastJoin: the broadcast scenario's connections join the room
// first, and every broadcast still reaches each of them exactly once.
func TestBroadcastJoin(t *testing.T) {
	g := startGateway(t, "gateway", "WSGATE_JWT_SECRET="+joinSecret, "WSGATE_API_KEY="+joinAPIKey)
	res := runBench(t, "broadcast", "--url", g.wsURL(), "--conns", "20", "--rate", "5", "--duration", "2s", "--settle", smokeSettle,
		"--join", "lobby", "--jwt-secret", joinSecret, "--api-key", joinAPIKey)
	checkCommon(t, res, 20)
	checkMessages(t, res.rep, 10, 20)
	if j := res.rep.Connections.JoinTime; j == nil || j.Count != 20 {
		t.Errorf("join replies %v, want 20", j)
	}
	if m := roomMembers(t, g, "lobby"); len(m) != 20 {
		t.Errorf("room lobby has %d members, want 20", len(m))
	}
}

// TestJoinRefused: a join the node refuses (the user is at
// WSGATE_MAX_ROOMS_PER_USER already) fails the connection with the
// reply's code as its reason, and the run fails.
func TestJoinRefused(t *testing.T) {
	g := startGateway(t, "gateway", "WSGATE_JWT_SECRET="+joinSecret, "WSGATE_API_KEY="+joinAPIKey, "WSGATE_MAX_ROOMS_PER_USER=1")
	first := runBench(t, "connect", "--url", g.wsURL(), "--conns", "5", "--settle", "100ms",
		"--join", "one", "--jwt-secret", joinSecret, "--api-key", joinAPIKey)
	checkCommon(t, first, 5)
	res := runBench(t, "connect", "--url", g.wsURL(), "--conns", "5", "--settle", "100ms",
		"--join", "two", "--jwt-secret", joinSecret, "--api-key", joinAPIKey)
	c := res.rep.Connections
	if res.code != 1 || c.Succeeded != 0 || c.FailReasons["join refused forbidden"] != 5 {
		t.Errorf("status %d, succeeded %d, failures %v; want 1, 0 and 5 'join refused forbidden'", res.code, c.Succeeded, c.FailReasons)
	}
	if m := roomMembers(t, g, "two"); len(m) != 0 {
		t.Errorf("room two has members %v", m)
	}
}

func TestJoinFlags(t *testing.T) {
	noEnv := func(string) (string, bool) { return "", false }
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"connect", "--join", "bench"}, "--join needs --jwt-secret"},
		{[]string{"push", "--join", "bench", "--jwt-secret", "x"}, "--join is for connect, broadcast and soak"},
		{[]string{"connect", "--join", "a\tb", "--jwt-secret", "x"}, "--join: room contains a control character"},
	} {
		var stdout, stderr strings.Builder
		code := mainWith(tc.args, noEnv, &stdout, &stderr)
		if msg := stderr.String(); code != 2 || !strings.Contains(msg, tc.want) {
			t.Errorf("%v: status %d, stderr %q; want 2 and %q", tc.args, code, msg, tc.want)
		}
	}
}
