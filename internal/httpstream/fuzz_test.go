package httpstream

import (
	"maps"
	"net/http"
	"testing"

	"github.com/wsgate/wsgate/internal/admission"
	"github.com/wsgate/wsgate/protocol"
)

// FuzzParseCursor: a Last-Event-ID (any bytes: it comes from the network)
// is refused or read into valid positions, at most MaxRoomSince rooms
// with valid names, which encode back to a cursor that reads the same.
func FuzzParseCursor(f *testing.F) {
	for _, s := range []string{
		Cursor(0, nil), Cursor(42, []RoomPos{{"a", 1}, {"b:c", 1 << 40}}), "", "AQ", "AgE", "AQAB", "AQABYQ", "AQABYQE", "////", "AQ==",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		since, rooms, err := ParseCursor(s)
		if err != nil {
			return
		}
		if since < 0 || len(rooms) > admission.MaxRoomSince {
			t.Fatalf("%q: since %d, %d rooms", s, since, len(rooms))
		}
		var pos []RoomPos
		for room, seq := range rooms {
			if protocol.ValidName("room", room) != nil || seq < 0 {
				t.Fatalf("%q: room %q seq %d", s, room, seq)
			}
			pos = append(pos, RoomPos{room, seq})
		}
		since2, rooms2, err := ParseCursor(Cursor(since, pos))
		if err != nil || since2 != since || !maps.Equal(rooms, rooms2) {
			t.Fatalf("%q: re-encoded it reads %d %v (%v), want %d %v", s, since2, rooms2, err, since, rooms)
		}
	})
}

// FuzzReadRequest: any body of POST /stream and any Last-Event-ID give
// the parameters or a 400/413 with a reason, never a panic.
func FuzzReadRequest(f *testing.F) {
	f.Add(`{"token":"t","since":"3","room_since":["r:1"],"device":"d","format":"json","user":"u"}`, "")
	f.Add(`{"since":7}`, Cursor(5, []RoomPos{{"r", 2}}))
	f.Add(`{"room_since":"r:1"}`, "x")
	f.Add(``, ``)
	f.Add(`null`, ``)
	f.Add(`[]`, ``)
	f.Add(`{"format":"msgpack"}`, ``)
	f.Fuzz(func(t *testing.T, body, lastEventID string) {
		for _, k := range []Kind{SSE, NDJSON} {
			r := request("POST", "/stream?since=1", body, http.Header{"Last-Event-Id": {lastEventID}})
			if _, f := ReadRequest(r, k); f != nil && (f.Status != 400 && f.Status != 413 || f.Msg == "") {
				t.Fatalf("%v %q %q: refusal %+v", k, body, lastEventID, f)
			}
		}
	})
}
