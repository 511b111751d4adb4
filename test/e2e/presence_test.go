package e2e

// Room presence under churn and faults (contract 19): connections join
// and leave one room on three nodes while a node is SIGKILLed and the
// nodes' Redis Pub/Sub connections are killed (CLIENT KILL TYPE pubsub:
// joined and left frames of the bus are lost). Every member records its
// joined and left frames as they come off the socket. Then: the room's
// presence (the API) equals the connections that are open and joined, and
// every open member's view (the joined and left it got, applied in order)
// equals it too, without itself; for one conn_id no member ever got left
// before joined, or the same frame twice in a row.

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/wsgate/wsgate/client"
	"github.com/wsgate/wsgate/internal/testutil/redistest"
	"github.com/wsgate/wsgate/protocol"
)

const presenceRoom = "meet:churn"

// presMember is one connection of the churn and what it recorded.
type presMember struct {
	t    *testing.T
	id   string // conn id
	node *gateway
	conn *client.Conn
	done chan struct{}

	mu      sync.Mutex
	frames  []string // "joined ID" / "left ID", in socket order
	replies map[string]chan *protocol.ServerFrame
	joined  bool // its join was answered ok and no leave since
	closed  bool // it closed, or its socket ended
}

func openMember(t *testing.T, g *gateway, user string) (*presMember, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, w, err := client.Dial(ctx, g.WS(), client.DialOptions{Token: token(t, user, map[string]any{"rooms": []string{"meet:*"}})})
	if err != nil {
		return nil, err
	}
	m := &presMember{t: t, id: w.ConnID, node: g, conn: conn, done: make(chan struct{}), replies: map[string]chan *protocol.ServerFrame{}}
	go m.read()
	t.Cleanup(func() { _ = conn.Close(); <-m.done })
	return m, nil
}

func (m *presMember) read() {
	defer close(m.done)
	for {
		f, err := m.conn.ReadFrame()
		if err != nil {
			m.mu.Lock()
			m.closed = true
			m.mu.Unlock()
			return
		}
		m.mu.Lock()
		switch f.Type {
		case protocol.TypeJoined, protocol.TypeLeft:
			if f.Room != presenceRoom {
				m.t.Errorf("member %s: %s of room %q", m.id, f.Type, f.Room)
			}
			m.frames = append(m.frames, f.Type+" "+f.ConnID)
		case protocol.TypeReply:
			if strings.HasPrefix(f.ID, "l") && f.OK {
				// Its own leave: what it knew of the room is void; a
				// new join tells it the room again.
				m.frames = append(m.frames, "reset")
			}
			if ch := m.replies[f.ID]; ch != nil {
				ch <- f
			}
		}
		m.mu.Unlock()
	}
}

// request sends a join or leave and waits for its reply; false when the
// connection ended first.
func (m *presMember) request(typ, id string) bool {
	ch := make(chan *protocol.ServerFrame, 1)
	m.mu.Lock()
	m.replies[id] = ch
	m.mu.Unlock()
	if err := m.conn.WriteFrame(&protocol.ClientFrame{Type: typ, ID: id, Room: presenceRoom}); err != nil {
		return false
	}
	select {
	case r := <-ch:
		if !r.OK {
			m.t.Errorf("member %s: %s refused: %+v", m.id, typ, r.Error)
			return false
		}
	case <-m.done:
		return false
	case <-time.After(15 * time.Second):
		m.t.Errorf("member %s: no reply to %s", m.id, typ)
		return false
	}
	m.mu.Lock()
	m.joined = typ == protocol.TypeJoin
	m.mu.Unlock()
	return true
}

func (m *presMember) close() {
	_ = m.conn.WriteClose(protocol.CloseNormal, "")
	select {
	case <-m.done:
	case <-time.After(5 * time.Second):
		_ = m.conn.Close()
		<-m.done
	}
}

// view applies the member's frames in order and checks them: joined and
// left alternate per conn_id, starting with joined, never about itself;
// its own leave starts the view afresh.
func (m *presMember) view() (map[string]bool, error) {
	m.mu.Lock()
	frames := slices.Clone(m.frames)
	m.mu.Unlock()
	v := map[string]bool{}
	for i, f := range frames {
		if f == "reset" {
			clear(v)
			continue
		}
		typ, id, _ := strings.Cut(f, " ")
		switch {
		case id == m.id:
			return nil, fmt.Errorf("frame %d: %s about itself", i, typ)
		case typ == protocol.TypeJoined && v[id]:
			return nil, fmt.Errorf("frame %d: joined %s twice without a left", i, id)
		case typ == protocol.TypeLeft && !v[id]:
			return nil, fmt.Errorf("frame %d: left %s before its joined (frames: %v)", i, id, frames[:i+1])
		}
		if typ == protocol.TypeJoined {
			v[id] = true
		} else {
			delete(v, id)
		}
	}
	return v, nil
}

func (m *presMember) state() (open, joined bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return !m.closed, m.joined && !m.closed
}

func roomPresence(g *gateway) (map[string]bool, error) { return roomPresenceOf(g, presenceRoom) }

// roomPresenceOf reads room's presence through g's API: its conn ids.
func roomPresenceOf(g *gateway, room string) (map[string]bool, error) {
	var p struct {
		Connections int `json:"connections"`
		Clients     []struct {
			ConnID string `json:"conn_id"`
		} `json:"clients"`
		Cursor string `json:"cursor"`
	}
	st, body, err := g.call("GET", "/api/v1/rooms/"+room+"/presence?limit=10000", nil)
	if err != nil || st != 200 {
		return nil, fmt.Errorf("presence: %d %s %v", st, body, err)
	}
	if err := json.Unmarshal(body, &p); err != nil {
		return nil, err
	}
	out := map[string]bool{}
	for _, c := range p.Clients {
		out[c.ConnID] = true
	}
	if len(out) != p.Connections || p.Cursor != "" {
		return nil, fmt.Errorf("presence lists %d of %d connections (cursor %q)", len(out), p.Connections, p.Cursor)
	}
	return out, nil
}

// writeRoomsFile writes a rooms file and returns its path.
func writeRoomsFile(t *testing.T, body string) string {
	t.Helper()
	rf := filepath.Join(t.TempDir(), "rooms.yml")
	if err := os.WriteFile(rf, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return rf
}

func TestRoomPresenceUnderChurnAndFaults(t *testing.T) {
	t.Parallel()
	srv := redistest.Standalone(t, redistest.Options{})
	rf := writeRoomsFile(t, "rooms:\n  - pattern: \"meet:*\"\n    presence: true\n    join_leave: true\n")
	c := newCluster(t, srv.URL(), map[string]string{"WSGATE_ROOMS_FILE": rf})
	nodes := c.startNodes("pres", 3, nil)

	const total, workers = 200, 8
	var (
		mu      sync.Mutex
		members []*presMember
		next    int
	)
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 7))
	var rngMu sync.Mutex
	pick := func(n int) int { rngMu.Lock(); defer rngMu.Unlock(); return rng.IntN(n) }
	killed := make(chan struct{})
	progress := make(chan int, total+workers) // each connection's number as it opens
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for {
				mu.Lock()
				i := next
				next++
				mu.Unlock()
				progress <- i
				if i >= total {
					return
				}
				live := nodes[:2]
				select {
				case <-killed:
				default:
					live = nodes
				}
				g := live[pick(len(live))]
				m, err := openMember(t, g, fmt.Sprintf("pu%d", i))
				if err != nil {
					continue // the node was killed meanwhile
				}
				mu.Lock()
				members = append(members, m)
				mu.Unlock()
				if !m.request(protocol.TypeJoin, "j1") {
					continue
				}
				switch pick(4) {
				case 0: // leaves and comes back
					if m.request(protocol.TypeLeave, "l1") {
						m.request(protocol.TypeJoin, "j2")
					}
				case 1: // leaves for good
					m.request(protocol.TypeLeave, "l1")
				case 2: // closes
					m.close()
				}
			}
		})
	}
	faults := []string{}
	at := 0
	for step := 0; step < 3 && at < total; step++ {
		switch step {
		case 0, 2:
			n, err := srv.KillClients("pubsub")
			faults = append(faults, fmt.Sprintf("CLIENT KILL TYPE pubsub at %d: %d (%v)", at, n, err))
		case 1:
			nodes[2].Kill()
			close(killed)
			faults = append(faults, fmt.Sprintf("SIGKILL %s at %d", nodes[2].ID, at))
		}
		// The next fault comes a fifth of the churn later.
		for until := at + total/5; at < until && at < total; {
			at = max(at, <-progress)
		}
	}
	wg.Wait()
	select {
	case <-killed:
	default:
		nodes[2].Kill()
		close(killed)
		faults = append(faults, "SIGKILL "+nodes[2].ID+" after the churn")
	}
	t.Logf("faults: %s", strings.Join(faults, "; "))

	want := func() map[string]bool {
		out := map[string]bool{}
		for _, m := range members {
			if _, joined := m.state(); joined && m.node != nodes[2] {
				out[m.id] = true
			}
		}
		return out
	}
	eventually(t, 30*time.Second, "room presence equals the open joined connections", func() (bool, string) {
		got, err := roomPresence(nodes[0])
		if err != nil {
			return false, err.Error()
		}
		w := want()
		return maps.Equal(got, w), fmt.Sprintf("presence has %d, want %d (%s)", len(got), len(w), diffSets(got, w))
	})
	final := want()
	open := 0
	for _, m := range members {
		if _, joined := m.state(); !joined || m.node == nodes[2] {
			continue
		}
		open++
		eventually(t, 20*time.Second, "member "+m.id+"'s view equals the room's presence", func() (bool, string) {
			v, err := m.view()
			if err != nil {
				t.Fatalf("member %s on %s: %v", m.id, m.node.ID, err)
			}
			w := maps.Clone(final)
			delete(w, m.id)
			return maps.Equal(v, w), diffSets(v, w)
		})
	}
	for _, m := range members {
		if _, err := m.view(); err != nil {
			t.Fatalf("member %s on %s: %v", m.id, m.node.ID, err)
		}
	}
	if open < 20 {
		t.Fatalf("only %d members open at the end: the churn checked too little", open)
	}
	t.Logf("%d connections churned on 3 nodes; %d open members, each with a view equal to the room's presence", len(members), open)
}

func diffSets(got, want map[string]bool) string {
	var extra, missing []string
	for k := range got {
		if !want[k] {
			extra = append(extra, k)
		}
	}
	for k := range want {
		if !got[k] {
			missing = append(missing, k)
		}
	}
	slices.Sort(extra)
	slices.Sort(missing)
	return fmt.Sprintf("extra %v, missing %v", extra, missing)
}

// SIGHUP reads the rooms file again: a namespace added to the file takes
// effect without a restart (the connection stays), a file that does not
// parse leaves the namespaces in use; a bad file at start stops the node
// with one line and exit status 2.
func TestRoomsFileReloadedOnSIGHUP(t *testing.T) {
	t.Parallel()
	srv := redistest.Standalone(t, redistest.Options{})
	rf := writeRoomsFile(t, "rooms:\n  - pattern: \"a:*\"\n    presence: true\n")
	c := newCluster(t, srv.URL(), map[string]string{"WSGATE_ROOMS_FILE": rf})
	g := c.startNode("hup1", nil)
	m, err := openMember(t, g, "hup-user")
	if err != nil {
		t.Fatal(err)
	}
	status := func(room string) int {
		st, _, err := g.call("GET", "/api/v1/rooms/"+room+"/presence", nil)
		if err != nil {
			t.Fatal(err)
		}
		return st
	}
	if st := status("b:1"); st != 404 {
		t.Fatalf("presence of b:1 before the reload: %d, want 404 (no namespace)", st)
	}
	if err := os.WriteFile(rf, []byte("rooms:\n  - pattern: \"a:*\"\n    presence: true\n  - pattern: \"b:*\"\n    presence: true\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	g.current().Signal(syscall.SIGHUP)
	eventually(t, 10*time.Second, "b:* has presence after SIGHUP", func() (bool, string) {
		st := status("b:1")
		return st == 200, fmt.Sprint("status ", st)
	})
	if err := os.WriteFile(rf, []byte("rooms:\n  - pattern: b\n    scope: tab\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	g.current().Signal(syscall.SIGHUP)
	eventually(t, 10*time.Second, "the bad file logged", func() (bool, string) {
		return strings.Contains(g.log(), "rooms file not reloaded"), "no log line yet"
	})
	if st := status("b:1"); st != 200 {
		t.Fatalf("after a bad file: presence of b:1 answers %d, want the namespaces in use kept (200)", st)
	}
	if open, _ := m.state(); !open {
		t.Fatal("the connection did not survive the reloads")
	}
	cmd := exec.Command(wsgateBin, "gateway")
	cmd.Env = append(os.Environ(), "WSGATE_JWT_SECRET="+jwtSecret, "WSGATE_LISTEN=127.0.0.1:0", "WSGATE_ROOMS_FILE="+rf)
	out, _ := cmd.CombinedOutput()
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if cmd.ProcessState == nil || cmd.ProcessState.ExitCode() != 2 || len(lines) != 1 ||
		!strings.Contains(lines[0], `WSGATE_ROOMS_FILE`) || !strings.Contains(lines[0], `scope must be user or connection, got "tab"`) {
		t.Fatalf("a bad rooms file at start: %v, output %q; want exit 2 and one line", cmd.ProcessState, out)
	}
}
