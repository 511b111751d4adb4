package e2e

// Batch publish through real gateway processes: a batch's user messages
// reach each other node in one bus envelope, in batch order, with their
// seqs, whatever mix of users, nodes and reliability the batch has.

import (
	"encoding/json"
	"net/http"
	"slices"
	"testing"
)

func TestTargetedBusBatch(t *testing.T) {
	t.Parallel()
	n, b := startCounted(t, "batch-")
	conn := b.conn
	a2, b2 := conn(n[1], "ann-n2"), conn(n[1], "bob-n2")
	c3 := conn(n[2], "cat-n3")
	d2, d3 := conn(n[1], "dan-n2-n3"), conn(n[2], "dan-n2-n3")
	e1 := conn(n[0], "eve-n1")

	type msg struct {
		user     string
		event    string
		reliable bool
	}
	batch := []msg{
		{"ann-n2", "a1", true}, {"cat-n3", "c1", true}, {"dan-n2-n3", "d1", true},
		{"bob-n2", "b1", false}, {"eve-n1", "e1", true}, {"ann-n2", "a2", false},
		{"nobody", "x1", true}, {"dan-n2-n3", "d2", false}, {"ann-n2", "a3", true},
		{"cat-n3", "c2", false}, {"dan-n2-n3", "d3", true}, {"eve-n1", "e2", false},
	}
	var results []map[string]any
	got := b.measure(0, func() {
		var body struct {
			Messages []publishBody `json:"messages"`
		}
		for _, m := range batch {
			p := toUser(m.user, m.event)
			p.Reliable = m.reliable
			body.Messages = append(body.Messages, p)
		}
		var ans struct {
			Results []map[string]any `json:"results"`
		}
		raw := n[0].mustCall(t, http.StatusOK, http.MethodPost, "/api/v1/publish/batch", body)
		if err := json.Unmarshal(raw, &ans); err != nil || len(ans.Results) != len(batch) {
			t.Fatalf("batch answer %s: %v", raw, err)
		}
		results = ans.Results
		for _, w := range []struct {
			p      *probe
			events []string
		}{
			{a2, []string{"a1", "a2", "a3"}}, {b2, []string{"b1"}}, {c3, []string{"c1", "c2"}},
			{d2, []string{"d1", "d2", "d3"}}, {d3, []string{"d1", "d2", "d3"}}, {e1, []string{"e1", "e2"}},
		} {
			var last int64
			for _, ev := range w.events {
				f := w.p.expect(ev)
				if f.Seq != 0 && f.Seq <= last {
					t.Errorf("%s: seq %d after %d", w.p.user, f.Seq, last)
				}
				last = max(last, f.Seq)
			}
		}
	})
	// One envelope per node that holds a recipient (n2, n3); none for the
	// publishing node (its own users are served locally) nor for n4.
	if want := []int{0, 1, 1, 0}; !slices.Equal(got, want) {
		t.Errorf("bus message envelopes received per node n1..n4 = %v, want %v", got, want)
	}
	seqs := map[string]float64{}
	for i, m := range batch {
		r := results[i]
		seq, _ := r["seq"].(float64)
		online, _ := r["online"].(bool)
		if m.reliable {
			seqs[m.user]++
			if seq != seqs[m.user] {
				t.Errorf("message %d to %s: seq %v, want %v", i, m.user, seq, seqs[m.user])
			}
		} else if seq != 0 {
			t.Errorf("message %d to %s (not reliable): seq %v", i, m.user, seq)
		}
		if online != (m.user != "nobody") {
			t.Errorf("message %d to %s: online %v", i, m.user, online)
		}
	}
}
