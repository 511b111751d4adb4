package upstream

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
)

const testSecret = "s3cret"

// webhookServer is a real HTTP server that checks the signature and the
// batch bound, keeps the records, and fails or hangs on demand.
type webhookServer struct {
	*httptest.Server
	got      collector
	failing  atomic.Bool
	hanging  atomic.Bool
	release  chan struct{}
	posts    atomic.Int64
	badPosts atomic.Int64
}

func newWebhookServer(t *testing.T) *webhookServer {
	w := &webhookServer{release: make(chan struct{})}
	w.Server = httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if r.Method != http.MethodPost || r.Header.Get(SignatureHeader) != Sign(testSecret, body) {
			w.badPosts.Add(1)
			http.Error(rw, "bad signature", http.StatusUnauthorized)
			return
		}
		if w.hanging.Load() {
			select {
			case <-w.release:
			case <-r.Context().Done():
				return
			}
		}
		if w.failing.Load() {
			http.Error(rw, "failing on purpose", http.StatusInternalServerError)
			return
		}
		var b struct {
			Records []Record `json:"records"`
		}
		if err := json.Unmarshal(body, &b); err != nil || len(b.Records) == 0 || len(b.Records) > WebhookBatch {
			w.badPosts.Add(1)
			http.Error(rw, "bad batch", http.StatusBadRequest)
			return
		}
		w.posts.Add(1)
		w.got.add(b.Records...)
		rw.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(w.Close)
	t.Cleanup(func() {
		if n := w.badPosts.Load(); n != 0 {
			t.Errorf("webhook received %d posts with a bad signature or batch", n)
		}
	})
	return w
}

func TestWebhookSink(t *testing.T) {
	runSinkSuite(t, func(t *testing.T) *sinkHarness {
		w := newWebhookServer(t)
		return &sinkHarness{
			url: w.URL + "/hook", opt: Options{Secret: testSecret},
			received: func(*testing.T) []Record { return w.got.all() },
			down:     func() { w.failing.Store(true) }, up: func() { w.failing.Store(false) },
			hang: func() { w.hanging.Store(true) }, release: func() { w.hanging.Store(false); close(w.release) },
		}
	})
}

func TestWebhookBatchesOfAtMost100(t *testing.T) {
	w := newWebhookServer(t)
	s := openSink(t, &sinkHarness{url: w.URL, opt: Options{Secret: testSecret}})
	recs := testRecords("big", 5, 50) // 250 records
	writeOK(t, s, recs)
	if n := w.posts.Load(); n != 3 {
		t.Fatalf("250 records took %d posts, want 3", n)
	}
	assertExactlyOnceInOrder(t, recs, w.got.all())
}

func TestWebhookWrongSecretIsRefused(t *testing.T) {
	w := newWebhookServer(t)
	s := openSink(t, &sinkHarness{url: w.URL, opt: Options{Secret: "other"}})
	ctx, cancel := contextWithTimeout(300)
	defer cancel()
	if err := s.Write(ctx, testRecords("x", 1, 1)); err == nil {
		t.Fatal("a webhook that refuses the signature accepted the batch")
	}
	if w.badPosts.Swap(0) == 0 {
		t.Fatal("the server saw no post with a bad signature")
	}
}
