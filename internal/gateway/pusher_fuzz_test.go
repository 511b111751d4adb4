package gateway

import (
	"errors"
	"net/url"
	"strconv"
	"testing"
	"time"
)

// FuzzPusherSignature: any query and body are refused with a Pusher API
// error or accepted only when signed with the secret, never a panic.
func FuzzPusherSignature(f *testing.F) {
	now := time.Unix(1700000000, 0)
	good := signedPusher(f, "POST", "http://x", "/apps/77/events", nil, []byte(`{"name":"e"}`), now)
	f.Add("POST", "/apps/77/events", good.URL.RawQuery, []byte(`{"name":"e"}`))
	f.Add("GET", "/apps/77/channels", "auth_key=k&auth_key=k", []byte(nil))
	f.Add("GET", "/apps/77/channels", "auth_signature=%zz", []byte(nil))
	f.Add("POST", "/apps/77/events", "auth_key=test-app-key&auth_timestamp=-9999999999999999999&auth_version=1.0&auth_signature=00", []byte("x"))
	f.Fuzz(func(t *testing.T, method, path, query string, body []byte) {
		err := checkPusherSignature(method, path, query, body, pusherTestKey, pusherTestSecret, now)
		if err == nil {
			// Accepted: the app's key, a signature, a fresh timestamp.
			q, _ := url.ParseQuery(query)
			ts, _ := strconv.ParseInt(q.Get("auth_timestamp"), 10, 64)
			if q.Get("auth_key") != pusherTestKey || q.Get("auth_signature") == "" || ts < now.Unix()-pusherSignatureSkew {
				t.Fatalf("accepted %s %s?%s", method, path, query)
			}
			return
		}
		var pe *pusherAPIError
		if !errors.As(err, &pe) || pe.status < 400 || pe.status > 499 {
			t.Fatalf("error %v is not a Pusher API 4xx", err)
		}
	})
}
