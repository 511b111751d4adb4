package autoscaler_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/wsgate/wsgate/client"
	"github.com/wsgate/wsgate/internal/testutil/proc"
	"github.com/wsgate/wsgate/internal/testutil/redistest"
	"github.com/wsgate/wsgate/internal/testutil/wsgatebin"
	"github.com/wsgate/wsgate/protocol"
)

const (
	e2eAPIKey    = "e2e-api-key-0123456789"
	e2eJWTSecret = "e2e-jwt-secret-0123456789abcdef0123"
)

func e2eToken(user string) string {
	s, err := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{
		"sub": user, "exp": time.Now().Add(time.Hour).Unix(),
	}).SignedString([]byte(e2eJWTSecret))
	if err != nil {
		panic(err)
	}
	return s
}

// e2eUser is a reconnecting client that records every reliable seq it got.
type e2eUser struct {
	id string
	c  *client.Client

	mu        sync.Mutex
	got       map[int64]bool
	gaps      int64
	welcomed  bool
	nodes     []string // the node of every welcome, in order
	answered  map[int64]bool
	published int
}

func (u *e2eUser) seen() (welcomed bool, nodes []string) {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.welcomed, append([]string(nil), u.nodes...)
}

// TestE2EScaleOutAndIn runs redis-server, `wsgate allocator` and `wsgate
// autoscaler --actuator local`, drives connections with the Go client so
// that the autoscaler goes 1 -> 2 -> 3 nodes, removes them so that it goes
// back 3 -> 2 -> 1 (draining one node at a time), and publishes reliable
// messages to the connected users all along: every seq the API answered
// must reach the user's reconnecting client.
func TestE2EScaleOutAndIn(t *testing.T) {
	if testing.Short() {
		t.Log("-short: the end-to-end test still runs (it takes about half a minute)")
	}
	start := time.Now()
	bin := wsgatebin.Path(t)
	t.Logf("binary built in %s", time.Since(start).Round(time.Millisecond))
	redis := redistest.Standalone(t, redistest.Options{})
	asPort, allocPort := wsgatebin.FreePort(t), wsgatebin.FreePort(t)
	basePort := freeRange(t, 3)
	asURL := fmt.Sprintf("http://127.0.0.1:%d", asPort)
	allocURL := fmt.Sprintf("http://127.0.0.1:%d", allocPort)

	as := startProc(t, "autoscaler", bin, []string{"autoscaler",
		"--actuator", "local", "--min-nodes", "1", "--max-nodes", "3", "--max-conns-per-node", "40",
		"--interval", "1s", "--cooldown", "2s", "--startup-grace", "2s",
		"--redis-url", redis.URL(), "--listen", fmt.Sprintf("127.0.0.1:%d", asPort),
		"--local-base-port", strconv.Itoa(basePort), "--local-binary", bin,
	}, []string{"WSGATE_CONFIG=", "WSGATE_API_KEY=" + e2eAPIKey, "WSGATE_JWT_SECRET=" + e2eJWTSecret}) // secrets never on a command line
	startAt := time.Now()
	// Whatever happens, no node the autoscaler started may outlive the test.
	t.Cleanup(func() { killStartedNodes(t, as) })
	alloc := startProc(t, "allocator", bin, []string{"allocator",
		"--listen", fmt.Sprintf("127.0.0.1:%d", allocPort), "--redis-url", redis.URL(),
	}, nil)
	_ = alloc

	status := func() autoscalerStatus {
		var s autoscalerStatus
		resp, err := http.Get(asURL + "/v1/status")
		if err != nil {
			return s
		}
		defer resp.Body.Close()
		_ = json.NewDecoder(resp.Body).Decode(&s)
		return s
	}
	// settled: the last decision counted n nodes, none draining or stale,
	// and no drain is pending.
	settled := func(n int) func() bool {
		return func() bool {
			if as.Exited() {
				t.Fatalf("the autoscaler exited:\n%s", tail(as.Output(), 5000))
			}
			s := status()
			return s.Decision.Current == n && s.Decision.Draining == 0 && s.Decision.Stale == 0 && s.PendingDrain == nil
		}
	}
	eventually(t, 30*time.Second, "the first node", settled(1))
	t.Logf("%5.1fs  1 node up", time.Since(startAt).Seconds())

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	// ---- users: reconnecting clients that receive reliable messages ----
	var usersMu sync.Mutex
	var users []*e2eUser
	var runWG sync.WaitGroup
	addUsers := func(n int) {
		for range n {
			usersMu.Lock()
			u := &e2eUser{id: fmt.Sprintf("user-%d", len(users)+1), got: map[int64]bool{}, answered: map[int64]bool{}}
			users = append(users, u)
			usersMu.Unlock()
			c, err := client.New(client.Config{
				Allocator: allocURL, User: u.id,
				Token: func(context.Context) (string, error) { return e2eToken(u.id), nil },
				Handlers: client.Handlers{
					OnMessage: func(m protocol.Message) {
						if m.Seq > 0 {
							u.mu.Lock()
							u.got[m.Seq] = true
							u.mu.Unlock()
						}
					},
					OnGap: func(from, to, missed int64) {
						u.mu.Lock()
						u.gaps += missed
						u.mu.Unlock()
					},
					OnWelcome: func(w client.Welcome) {
						u.mu.Lock()
						u.welcomed = true
						u.nodes = append(u.nodes, w.Node)
						u.mu.Unlock()
					},
				},
			})
			if err != nil {
				t.Fatal(err)
			}
			u.c = c
			runWG.Add(1)
			go func() {
				defer runWG.Done()
				_ = c.Run(ctx)
			}()
			eventually(t, 15*time.Second, u.id+" connected", func() bool { w, _ := u.seen(); return w })
		}
	}
	t.Cleanup(func() {
		usersMu.Lock()
		defer usersMu.Unlock()
		for _, u := range users {
			u.c.Close()
		}
		runWG.Wait()
	})

	// ---- the publisher: reliable messages to every connected user, through
	// the API of whichever node the allocator names, all along ----
	pubStop := make(chan struct{})
	pubDone := make(chan struct{})
	var pubErrors int
	go func() {
		defer close(pubDone)
		hc := &http.Client{Timeout: 5 * time.Second}
		api := ""
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for i := 0; ; i++ {
			select {
			case <-pubStop:
				return
			case <-tick.C:
			}
			usersMu.Lock()
			round := append([]*e2eUser(nil), users...)
			usersMu.Unlock()
			for _, u := range round {
				if api == "" {
					api = allocateAPI(hc, allocURL)
				}
				seq, err := publishReliable(hc, api, u.id, i)
				if err != nil {
					pubErrors++
					api = "" // that node is going away: ask the allocator again
					continue
				}
				u.mu.Lock()
				u.answered[seq] = true
				u.published++
				u.mu.Unlock()
			}
		}
	}()
	stopPublisher := func() {
		select {
		case <-pubStop:
		default:
			close(pubStop)
		}
		<-pubDone
	}
	t.Cleanup(stopPublisher)

	// ---- load: plain connections (client.Dial) that only hold a slot ----
	var load []*client.Conn
	var loadWG sync.WaitGroup
	addLoad := func(n int) {
		hc := &http.Client{Timeout: 5 * time.Second}
		for i := range n {
			user := fmt.Sprintf("load-%d-%d", len(load), i)
			var conn *client.Conn
			eventually(t, 15*time.Second, "a load connection", func() bool {
				wsURL := allocate(hc, allocURL, user)
				if wsURL == "" {
					return false
				}
				c, _, err := client.Dial(ctx, wsURL, client.DialOptions{Token: e2eToken(user)})
				if err != nil {
					return false
				}
				conn = c
				return true
			})
			load = append(load, conn)
			loadWG.Add(1)
			go func() { // read (answering pings) until the connection ends
				defer loadWG.Done()
				for {
					if _, err := conn.ReadFrame(); err != nil && err != client.ErrBadFrame {
						return
					}
				}
			}()
		}
	}
	dropLoad := func() {
		for _, c := range load {
			c.Close()
		}
		loadWG.Wait()
		load = nil
	}
	t.Cleanup(dropLoad)

	// 1 node: 3 users + 32 load connections = 35 of 40 (0.875 > 0.75).
	addUsers(3)
	addLoad(32)
	t.Logf("%5.1fs  35 connections on 1 node", time.Since(startAt).Seconds())
	eventually(t, 30*time.Second, "scale-out to 2 nodes", settled(2))
	t.Logf("%5.1fs  2 nodes", time.Since(startAt).Seconds())

	// 2 nodes: 3 more users and 30 more load connections = 68 of 80 (0.85).
	addUsers(3)
	addLoad(30)
	t.Logf("%5.1fs  68 connections on 2 nodes", time.Since(startAt).Seconds())
	eventually(t, 30*time.Second, "scale-out to 3 nodes", settled(3))
	t.Logf("%5.1fs  3 nodes", time.Since(startAt).Seconds())
	addUsers(2) // the two least loaded nodes: never the first one

	// The load goes away: 8 of 120 (0.07). Scale-in, one node at a time,
	// draining each (its users are redirected and resume).
	dropLoad()
	t.Logf("%5.1fs  load removed: 8 users left", time.Since(startAt).Seconds())
	eventually(t, 60*time.Second, "scale-in to 1 node", settled(1))
	t.Logf("%5.1fs  1 node", time.Since(startAt).Seconds())

	// A little more traffic on the last node, then stop publishing and
	// wait for every answered message to arrive.
	published := func() int {
		n := 0
		for _, u := range users {
			u.mu.Lock()
			n += u.published
			u.mu.Unlock()
		}
		return n
	}
	before := published()
	eventually(t, 10*time.Second, "publishes on the last node", func() bool { return published() >= before+80 })
	stopPublisher()
	usersMu.Lock()
	defer usersMu.Unlock()
	missing := func(u *e2eUser) []int64 {
		u.mu.Lock()
		defer u.mu.Unlock()
		var m []int64
		for s := range u.answered {
			if !u.got[s] {
				m = append(m, s)
			}
		}
		sort.Slice(m, func(i, j int) bool { return m[i] < m[j] })
		return m
	}
	deadline := time.Now().Add(20 * time.Second)
	for _, u := range users {
		for len(missing(u)) > 0 && time.Now().Before(deadline) {
			time.Sleep(50 * time.Millisecond)
		}
	}
	totalAnswered, totalGot, moved := 0, 0, 0
	for _, u := range users {
		m := missing(u)
		u.mu.Lock()
		st := u.c.Stats()
		t.Logf("%s: %d answered, %d received, %d gaps, %d duplicates dropped, nodes %v", u.id, len(u.answered), len(u.got), u.gaps, st.Duplicates, u.nodes)
		totalAnswered += len(u.answered)
		totalGot += len(u.got)
		if len(u.nodes) > 1 {
			moved++
		}
		if u.gaps > 0 {
			t.Errorf("%s: gap frames for %d messages", u.id, u.gaps)
		}
		u.mu.Unlock()
		if len(m) > 0 {
			t.Errorf("%s: %d answered seqs never received: %v", u.id, len(m), m[:min(len(m), 20)])
		}
	}
	t.Logf("reliable messages: %d answered by the API, %d received; %d publish errors (retried on another node); %d of %d users moved by a drain",
		totalAnswered, totalGot, pubErrors, moved, len(users))
	if moved == 0 {
		t.Errorf("no user was moved by a drain: the scale-in did not exercise the redirect")
	}

	// ---- the timeline the autoscaler logged ----
	type action struct {
		at              float64
		action          string
		current, wanted int
		drain, reason   string
		reasons         []any
	}
	var acts []action
	for _, l := range jsonLines(as.Output()) {
		if l["msg"] != "decision" || l["action"] == "none" {
			continue
		}
		ts, _ := time.Parse(time.RFC3339Nano, fmt.Sprint(l["time"]))
		a := action{at: ts.Sub(startAt).Seconds(), action: fmt.Sprint(l["action"]), reason: fmt.Sprint(l["reason"]),
			current: int(l["current"].(float64)), wanted: int(l["desired"].(float64))}
		if d, ok := l["drain"].(string); ok {
			a.drain = d
		}
		a.reasons, _ = l["reasons"].([]any)
		acts = append(acts, a)
	}
	var got []string
	for _, a := range acts {
		got = append(got, fmt.Sprintf("%s %d->%d", a.action, a.current, a.wanted))
		var rs []string
		for _, r := range a.reasons {
			rs = append(rs, fmt.Sprint(r))
		}
		t.Logf("%5.1fs  %-9s %d -> %d  reason=%s drain=%q\n          %s", a.at, a.action, a.current, a.wanted, a.reason, a.drain, strings.Join(rs, "\n          "))
	}
	want := []string{"scale_out 0->1", "scale_out 1->2", "scale_out 2->3", "scale_in 3->2", "scale_in 2->1"}
	if strings.Join(got, ", ") != strings.Join(want, ", ") {
		t.Errorf("scaling actions %q, want %q", got, want)
	}

	// ---- SIGTERM: the autoscaler drains the node it started and exits 0 ----
	for _, u := range users {
		u.c.Close()
	}
	if !as.Stop(60 * time.Second) {
		t.Fatal("the autoscaler did not stop within 60s of SIGTERM")
	}
	if code := as.ExitCode(); code != 0 {
		t.Errorf("autoscaler exit status %d", code)
	}
	for _, pid := range startedPIDs(as) {
		if alive(pid) {
			t.Errorf("node process %d outlived the autoscaler", pid)
		}
	}
	t.Logf("total %s", time.Since(start).Round(100*time.Millisecond))
}

type autoscalerStatus struct {
	Decision struct {
		Action   string `json:"action"`
		Current  int    `json:"current_nodes"`
		Desired  int    `json:"desired_nodes"`
		Draining int    `json:"draining"`
		Stale    int    `json:"stale"`
	} `json:"decision"`
	PendingDrain *struct {
		Node string `json:"node"`
	} `json:"pending_drain"`
}

// startedPIDs lists the pids of the nodes the autoscaler logged starting.
func startedPIDs(as *proc.Proc) []int {
	var pids []int
	for _, l := range jsonLines(as.Output()) {
		if l["msg"] == "local actuator: node started" {
			if pid, ok := l["pid"].(float64); ok {
				pids = append(pids, int(pid))
			}
		}
	}
	return pids
}

func killStartedNodes(t *testing.T, as *proc.Proc) {
	for _, pid := range startedPIDs(as) {
		if alive(pid) {
			t.Logf("killing node process %d left running", pid)
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
}

// allocate asks the allocator for a node for user; "" when it cannot.
func allocate(hc *http.Client, allocURL, user string) string {
	resp, err := hc.Get(allocURL + "/v1/allocate?user=" + url.QueryEscape(user))
	if err != nil {
		return ""
	}
	defer resp.Body.Close()
	var a struct {
		URL string `json:"url"`
	}
	if resp.StatusCode != http.StatusOK || json.NewDecoder(resp.Body).Decode(&a) != nil {
		return ""
	}
	return a.URL
}

// allocateAPI returns the HTTP base URL of a node the allocator names.
func allocateAPI(hc *http.Client, allocURL string) string {
	ws := allocate(hc, allocURL, "publisher")
	if ws == "" {
		return ""
	}
	return strings.TrimSuffix(strings.Replace(ws, "ws://", "http://", 1), "/ws")
}

// publishReliable publishes one reliable message to user and returns its seq.
func publishReliable(hc *http.Client, api, user string, i int) (int64, error) {
	if api == "" {
		return 0, fmt.Errorf("no node")
	}
	body := fmt.Sprintf(`{"target":{"type":"user","id":%q},"event":"tick","data":{"i":%d},"reliable":true}`, user, i)
	req, _ := http.NewRequest(http.MethodPost, api+"/api/v1/publish", bytes.NewBufferString(body))
	req.Header.Set("Authorization", "Bearer "+e2eAPIKey)
	req.Header.Set("Content-Type", "application/json")
	resp, err := hc.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("publish: %s: %s", resp.Status, b)
	}
	var r struct {
		Seq int64 `json:"seq"`
	}
	if err := json.Unmarshal(b, &r); err != nil || r.Seq == 0 {
		return 0, fmt.Errorf("publish: no seq in %s", b)
	}
	return r.Seq, nil
}
