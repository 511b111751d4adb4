package e2e

// A rolling upgrade: a node of the version before reliable rooms and a
// node of this one in one cluster (docs/reliability.md, rolling
// upgrades).

import (
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/wsgate/wsgate/protocol"
)

// previousVersion is the commit before reliable rooms.
const previousVersion = "8a6cfaa"

// buildPrevious builds the gateway of previousVersion from this
// repository's history (git archive, then go build).
func buildPrevious(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	src := filepath.Join(dir, "src")
	if err := os.Mkdir(src, 0o755); err != nil {
		t.Fatal(err)
	}
	archive := exec.Command("sh", "-c", "cd \"$(git rev-parse --show-toplevel)\" && git archive "+previousVersion+" | tar -x -C "+src)
	if out, err := archive.CombinedOutput(); err != nil {
		t.Fatalf("git archive %s: %v\n%s", previousVersion, err, out)
	}
	bin := filepath.Join(dir, "wsgate-previous")
	build := exec.Command("go", "build", "-o", bin, "./cmd/wsgate")
	build.Dir = src
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build of %s: %v\n%s", previousVersion, err, out)
	}
	return bin
}

// Plain room messages cross between the versions both ways; a reliable
// room message published on the new node reaches its members there and
// nobody on the old node (whose user seqs it leaves alone: the next
// reliable user message there still has seq 1); the old node refuses a
// reliable room publish.
func TestMixedVersionsKeepPlainRooms(t *testing.T) {
	t.Parallel()
	old := buildPrevious(t)
	c := newCluster(t, redisDeployments[0].start(t), nil)
	n1 := c.startNode("new", nil)
	n2 := c.startBinNoFatal("old", nil, old)
	if n2 == nil {
		t.FailNow()
	}
	for _, u := range []string{"on-new", "on-old"} {
		n1.mustCall(t, http.StatusNoContent, http.MethodPut, "/api/v1/rooms/mix/members/"+u, nil)
	}
	a := dial(t, n1, "on-new", nil)
	b := dial(t, n2, "on-old", nil)
	// Both versions declare a member's room interest before the welcome.

	n1.mustPublish(t, toRoom("mix", "plain-from-new"))
	n2.mustPublish(t, toRoom("mix", "plain-from-old"))
	for _, p := range []*probe{a, b} {
		got := map[string]bool{}
		for range 2 {
			f := p.next(5 * time.Second)
			if f.Seq != 0 {
				t.Fatalf("%s: plain room message with seq %d", p.user, f.Seq)
			}
			got[f.Event] = true
		}
		if !got["plain-from-new"] || !got["plain-from-old"] {
			t.Fatalf("%s got %v, want both plain room messages", p.user, got)
		}
	}

	rel := toReliableRoom("mix", "reliable-room")
	if a1 := n1.mustPublish(t, rel); a1.Seq != 1 {
		t.Fatalf("reliable room publish on the new node: seq %d", a1.Seq)
	}
	if f := a.next(5 * time.Second); f.Event != "reliable-room" || f.Seq != 1 || f.Target == nil || f.Target.Type != protocol.TargetRoom {
		t.Fatalf("member on the new node: %+v", f)
	}
	if _, st, _ := n2.publish(rel); st != http.StatusBadRequest {
		t.Errorf("reliable room publish on the old node: %d, want 400", st)
	}
	n1.mustPublish(t, reliable("on-old", "user-1"))
	if f := b.next(5 * time.Second); f.Event != "user-1" || f.Seq != 1 {
		t.Fatalf("member on the old node, after a reliable room message: %+v (%s), want the user message with seq 1", f, f.Data)
	}
}
