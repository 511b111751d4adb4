package protocol

import (
	"encoding/json"
	"testing"
)

// FuzzParsePusherFrame: any client frame is parsed or refused with an
// error, never a panic; a parsed frame has an event and a valid channel,
// and its subscribe data parses or is refused the same way.
func FuzzParsePusherFrame(f *testing.F) {
	for _, s := range []string{
		`{"event":"pusher:subscribe","data":{"channel":"presence-a","auth":"k:00","channel_data":"{\"user_id\":7}"}}`,
		`{"event":"client-x","channel":"private-a","data":{"n":1}}`,
		`{"event":"pusher:ping","data":{}}`,
		`{"event":"pusher:subscribe","data":"{\"channel\":\"a\"}"}`,
		`{"event":1}`, `[]`, `{"event":"e","channel":"bad channel"}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		p, err := ParsePusherFrame(b)
		if err != nil {
			return
		}
		if p.Event == "" || (p.Channel != "" && ValidPusherChannel(p.Channel) != nil) {
			t.Fatalf("accepted %q as %+v", b, p)
		}
		if s, err := ParsePusherSubscribe(p.Data); err == nil {
			if ValidPusherChannel(s.Channel) != nil {
				t.Fatalf("subscribe to an invalid channel %q accepted", s.Channel)
			}
			if m, err := ParsePusherMember(s.ChannelData); err == nil && (m.UserID == "" || len(m.UserID) > MaxPusherUserID) {
				t.Fatalf("member %+v accepted", m)
			}
		}
		var out map[string]any
		if json.Unmarshal(EncodePusher(p.Event, p.Channel, PusherDataString(p.Data), ""), &out) != nil {
			t.Fatal("EncodePusher wrote invalid JSON")
		}
	})
}
