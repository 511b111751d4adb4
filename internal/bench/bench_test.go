package bench

import (
	"strings"
	"testing"
)

// Small numbers: 50 connections, 2 s of load. --settle only bounds the
// waits (they end as soon as everything arrived or the nodes are back to
// their baseline), except for connect, where it is the hold before the
// last sample.
const (
	smokeConns  = "50"
	smokeSettle = "20s"
)

func TestConnect(t *testing.T) {
	g := startGateway(t, "dev")
	// Dials bound to 127.0.0.2..5 round-robin (any 127/8 address works on
	// Linux loopback).
	res := runBench(t, "connect", "--url", g.wsURL(), "--conns", smokeConns, "--ramp", "500", "--settle", "200ms",
		"--source-ips", "127.0.0.2-127.0.0.5")
	checkCommon(t, res, 50)
	d := res.rep.Derived
	if d.ConnsAdded != 50 {
		t.Errorf("the node gained %v connections, want 50", d.ConnsAdded)
	}
	if res.rep.Connections.ConnectTime.Count != 50 {
		t.Errorf("%d connect times, want 50", res.rep.Connections.ConnectTime.Count)
	}
	if e := res.rep.Total.End; e == nil || e.Connections != 50 {
		t.Errorf("end sample %+v, want 50 connections", e)
	}
}

func TestBroadcast(t *testing.T) {
	g := startGateway(t, "dev")
	res := runBench(t, "broadcast", "--url", g.wsURL(), "--conns", smokeConns, "--rate", "10", "--duration", "2s", "--settle", smokeSettle)
	checkCommon(t, res, 50)
	checkMessages(t, res.rep, 20, 50)
	if m := res.rep.Messages; m.Expected != 20*50 {
		t.Errorf("expected %d deliveries, want 1000", m.Expected)
	}
	if res.rep.Derived.ServerDelivered < 1000 {
		t.Errorf("the node counted %v deliveries, want at least 1000", res.rep.Derived.ServerDelivered)
	}
}

// TestBroadcastReaders runs a broadcast with each reader and format, and
// with messages larger than the event loop's 64 KiB buffer.
func TestBroadcastReaders(t *testing.T) {
	g := startGateway(t, "dev")
	for _, c := range []struct{ reader, format, size string }{
		{ReaderGoroutine, "json", "100"},
		{ReaderLoop, "msgpack", "100"},
		{ReaderGoroutine, "msgpack", "100"},
		{ReaderLoop, "json", "200000"},
	} {
		t.Run(c.reader+"/"+c.format+"/"+c.size, func(t *testing.T) {
			res := runBench(t, "broadcast", "--url", g.wsURL(), "--conns", "20", "--rate", "5", "--duration", "2s", "--settle", smokeSettle,
				"--reader", c.reader, "--format", c.format, "--size", c.size)
			checkCommon(t, res, 20)
			checkMessages(t, res.rep, 10, 20)
			if m := res.rep.Messages; m.Foreign != 0 || m.BadFrames != 0 {
				t.Errorf("foreign %d, bad frames %d", m.Foreign, m.BadFrames)
			}
			if r := res.rep.Config.Reader; r != c.reader {
				t.Errorf("reader %q, want %q", r, c.reader)
			}
		})
	}
}

func TestPushReliableWithJWT(t *testing.T) {
	g := startGateway(t, "gateway", "WSGATE_JWT_SECRET=bench-test-secret-0123456789abcdef", "WSGATE_API_KEY=bench-test-key-0123456789")
	args := []string{"push", "--url", g.wsURL(), "--conns", smokeConns, "--rate", "100", "--duration", "2s", "--settle", smokeSettle,
		"--reliable", "--jwt-secret", "bench-test-secret-0123456789abcdef", "--api-key", "bench-test-key-0123456789"}
	res := runBench(t, args...)
	checkCommon(t, res, 50)
	checkMessages(t, res.rep, 200, 50)
	m := res.rep.Messages
	if m.OutOfOrder != 0 || m.GapFrames != 0 || m.Foreign != 0 {
		t.Errorf("out of order %d, gaps %d, foreign %d", m.OutOfOrder, m.GapFrames, m.Foreign)
	}
	// Every message was acknowledged: a second run of the same users gets
	// nothing replayed from the first.
	res = runBench(t, args...)
	checkCommon(t, res, 50)
	checkMessages(t, res.rep, 200, 50)
	if f := res.rep.Messages.Foreign; f != 0 {
		t.Errorf("second run got %d messages of the first (%s): not acknowledged", f, res.rep.Messages.ForeignSample)
	}
}

// TestPushReliableGoroutineMsgpack: reliable delivery read by the
// goroutine reader on MessagePack frames (seq peeked from MessagePack,
// acks through client.Conn).
func TestPushReliableGoroutineMsgpack(t *testing.T) {
	g := startGateway(t, "dev")
	res := runBench(t, "push", "--url", g.wsURL(), "--conns", smokeConns, "--rate", "100", "--duration", "2s", "--settle", smokeSettle,
		"--reliable", "--reader", "goroutine", "--format", "msgpack")
	checkCommon(t, res, 50)
	checkMessages(t, res.rep, 200, 50)
	if m := res.rep.Messages; m.OutOfOrder != 0 || m.GapFrames != 0 || m.Foreign != 0 || m.BadFrames != 0 {
		t.Errorf("out of order %d, gaps %d, foreign %d, bad frames %d", m.OutOfOrder, m.GapFrames, m.Foreign, m.BadFrames)
	}
}

func TestPushSeveralDevicesPerUser(t *testing.T) {
	g := startGateway(t, "dev")
	res := runBench(t, "push", "--url", g.wsURL(), "--conns", smokeConns, "--users", "20", "--rate", "100", "--duration", "2s", "--settle", smokeSettle)
	checkCommon(t, res, 50)
	// 200 messages to 20 users; 10 users have 3 connections, 10 have 2.
	checkMessages(t, res.rep, 200, 50)
	if m := res.rep.Messages; m.Expected != 10*(10*3)+10*(10*2) {
		t.Errorf("expected %d deliveries, want 500", m.Expected)
	}
}

func TestRoom(t *testing.T) {
	g := startGateway(t, "dev")
	res := runBench(t, "room", "--url", g.wsURL(), "--conns", smokeConns, "--rooms", "5", "--rate", "50", "--duration", "2s", "--settle", smokeSettle)
	checkCommon(t, res, 50)
	// 100 messages over 5 rooms of 10 members each.
	checkMessages(t, res.rep, 100, 50)
	if m := res.rep.Messages; m.Expected != 100*10 {
		t.Errorf("expected %d deliveries, want 1000", m.Expected)
	}
}

func TestChurn(t *testing.T) {
	g := startGateway(t, "dev")
	// Every dial asks the allocator (every gateway serves /v1/allocate).
	res := runBench(t, "churn", "--allocator", "http://"+g.addr, "--api", "http://"+g.addr, "--conns", smokeConns,
		"--rate", "50", "--duration", "2s", "--settle", smokeSettle)
	checkCommon(t, res, 50)
	ch := res.rep.Churn
	if ch == nil || ch.Cycles != 100 || ch.Reopened != ch.Cycles || ch.Pending != 0 || ch.Polite != 50 || ch.Abrupt != 50 {
		t.Errorf("churn %+v, want 100 cycles, all reopened", ch)
	}
	if c := res.rep.Connections; c.Dials != 150 || c.DialFailures != 0 {
		t.Errorf("dials %d (failed %d), want 150", c.Dials, c.DialFailures)
	}
}

func TestStorm(t *testing.T) {
	g := startGateway(t, "dev")
	res := runBench(t, "storm", "--url", g.wsURL(), "--conns", smokeConns, "--duration", "60s", "--settle", smokeSettle)
	checkCommon(t, res, 50)
	s := res.rep.Storm
	if s == nil || s.Dropped != 50 || s.Reconnected != 50 || !s.Complete {
		t.Errorf("storm %+v, want 50 dropped and reconnected", s)
	}
	if c := res.rep.Connections; c.Reconnects != 50 || c.Drops != 50 {
		t.Errorf("reconnects %d drops %d, want 50", c.Reconnects, c.Drops)
	}
}

func TestFlags(t *testing.T) {
	noEnv := func(string) (string, bool) { return "", false }
	for _, tc := range []struct {
		args []string
		want string
	}{
		{nil, "missing scenario"},
		{[]string{"nope"}, `unknown scenario "nope"`},
		{[]string{"connect", "--conns", "0"}, "--conns must be at least 1"},
		{[]string{"connect", "--conns", "x"}, `invalid setting --conns="x"`},
		{[]string{"connect", "--bogus"}, "flag provided but not defined: -bogus"},
		{[]string{"connect", "--source-ips", "127.0.0.9-127.0.0.2"}, "--source-ips: range"},
		{[]string{"connect", "--url", "http://x/ws"}, "--url: want ws(s)://"},
		{[]string{"connect", "--api", "ws://x"}, "--api: want http(s)://"},
		{[]string{"broadcast", "--reliable"}, "--reliable is only for push"},
		{[]string{"push", "--duration", "0s"}, "--duration must be positive"},
		{[]string{"push", "--class", "urgent"}, "--class must be realtime, chat or notify"},
		{[]string{"push", "--format", "xml"}, "--format"},
		{[]string{"connect", "broadcast"}, "unexpected argument"},
		{[]string{"connect", "--conns", "1000000"}, "file descriptors"},
		{[]string{"ticker", "--slow", "120%"}, "--slow: want a percentage from 0% to 100%"},
		{[]string{"ticker", "--slow", "ten"}, "--slow: want a percentage"},
		{[]string{"ticker", "--keys", "0"}, "--keys must be between 1 and 10000"},
		{[]string{"ticker", "--slow-stall", "12s"}, "--slow-stall must be between 100ms and 7s"},
		{[]string{"ticker", "--transport", "sse"}, "the ticker's slow readers need websocket"},
	} {
		var stdout, stderr strings.Builder
		code := mainWith(tc.args, noEnv, &stdout, &stderr)
		msg := stderr.String()
		if code != 2 || !strings.Contains(msg, tc.want) || strings.Count(msg, "\n") != 1 {
			t.Errorf("%v: status %d, stderr %q; want 2 and one line containing %q", tc.args, code, msg, tc.want)
		}
	}
}

func TestHelp(t *testing.T) {
	var stdout, stderr strings.Builder
	noEnv := func(string) (string, bool) { return "", false }
	if code := mainWith([]string{"--help"}, noEnv, &stdout, &stderr); code != 0 {
		t.Fatalf("--help: status %d", code)
	}
	for _, f := range []string{"--url", "--allocator", "--api", "--api-key", "--jwt-secret", "--conns", "--rate", "--duration",
		"--source-ips", "--json", "--html", "--reliable", "--size", "--settle", "--users", "--rooms", "--metrics", "--ramp", "--inflight"} {
		if !strings.Contains(stdout.String(), f+" ") && !strings.Contains(stdout.String(), f+"[") {
			t.Errorf("--help does not list %s", f)
		}
	}
	for _, s := range Scenarios {
		if !strings.Contains(stdout.String(), s) {
			t.Errorf("--help does not list scenario %s", s)
		}
	}
}

func TestDerivedDefaults(t *testing.T) {
	cfg := Config{Scenario: ScenarioPush, URLs: []string{"ws://10.0.0.1:8080/ws", "wss://n2.example:443/ws"}, Conns: 10}.withDefaults()
	if strings.Join(cfg.API, ",") != "http://10.0.0.1:8080,https://n2.example:443" {
		t.Errorf("API %v", cfg.API)
	}
	if strings.Join(cfg.Metrics, ",") != "http://10.0.0.1:8080/metrics,https://n2.example:443/metrics" {
		t.Errorf("metrics %v", cfg.Metrics)
	}
	if cfg.Users != 10 || cfg.Rate != 1000 {
		t.Errorf("users %d rate %v", cfg.Users, cfg.Rate)
	}
}
