package admission

import (
	"encoding/json"
	"testing"

	"github.com/wsgate/wsgate/protocol"
)

// FuzzConnectAnswer feeds arbitrary connect proxy answers to the parser:
// it never panics, and what it accepts names a valid user and keeps the
// answer's claims.
func FuzzConnectAnswer(f *testing.F) {
	f.Add([]byte(`{"user":"carl","rooms":["team-*"],"pub":["room:team-*"],"send":["chat.*"],"info":{"plan":"pro"},"expire_at":1893456000}`))
	f.Add([]byte(`{"user":""}`))
	f.Add([]byte(`{"user":"a\u202eb"}`))
	f.Add([]byte(`{"user":"x","info":null,"expire_at":-1}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		c, err := parseConnectAnswer(body)
		if err != nil {
			return
		}
		if protocol.ValidName("user", c.Subject) != nil {
			t.Fatalf("accepted user %q", c.Subject)
		}
		var ans connectProxyAnswer
		if json.Unmarshal(body, &ans) != nil || ans.User != c.Subject || len(ans.Rooms) != len(c.Rooms) {
			t.Fatalf("claims %+v differ from the answer %q", c, body)
		}
	})
}
