package httpstream

import (
	"encoding/base64"
	"encoding/binary"
	"errors"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"github.com/wsgate/wsgate/internal/admission"
	"github.com/wsgate/wsgate/protocol"
)

// The SSE cursor (the id: of every event that carries a seq, contract
// 18): where the connection stood in each of its reliable streams when
// that event was queued, so that Last-Event-ID resumes the user's inbox
// and every reliable room at once, as since and room_since would.
//
// Encoding: base64url without padding of
//
//	version (1 byte, 1)
//	uvarint inbox position (the since it stands for)
//	then per reliable room, by name: uvarint name length, name, uvarint seq
//
// The connection takes the positions under its lock right after the
// event's own position moved, and frames leave in queue order, so the
// cursor of an event names exactly what the client had received up to
// and including it. A room the user has left since is ignored on resume (as
// room_since for a room the user is not a member of).

const cursorVersion = 1

// maxCursor bounds a cursor's encoded length (Last-Event-ID arrives in a
// request head of at most 16 KiB anyway).
const maxCursor = 16 << 10

// RoomPos is a reliable room's position in a cursor.
type RoomPos struct {
	Room string
	Pos  int64
}

// Cursor encodes the positions of a connection: its inbox and each
// reliable room (in any order; rooms is sorted by name).
func Cursor(inbox int64, rooms []RoomPos) string {
	b := make([]byte, 0, 16)
	b = append(b, cursorVersion)
	b = binary.AppendUvarint(b, uint64(max(inbox, 0)))
	slices.SortFunc(rooms, func(a, b RoomPos) int { return strings.Compare(a.Room, b.Room) })
	for _, r := range rooms {
		b = binary.AppendUvarint(b, uint64(len(r.Room)))
		b = append(b, r.Room...)
		b = binary.AppendUvarint(b, uint64(max(r.Pos, 0)))
	}
	return base64.RawURLEncoding.EncodeToString(b)
}

var errCursor = errors.New("Last-Event-ID (last_event_id) is not a cursor of this server")

// ParseCursor reads a cursor: the inbox position and each room's.
func ParseCursor(s string) (since int64, rooms map[string]int64, err error) {
	if len(s) > maxCursor {
		return 0, nil, errCursor
	}
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil || len(b) < 2 || b[0] != cursorVersion {
		return 0, nil, errCursor
	}
	b = b[1:]
	v, k := binary.Uvarint(b)
	if k <= 0 || v > 1<<62 {
		return 0, nil, errCursor
	}
	since, b = int64(v), b[k:]
	for len(b) > 0 {
		l, k := binary.Uvarint(b)
		if k <= 0 || l == 0 || l > uint64(len(b)-k) {
			return 0, nil, errCursor
		}
		name := string(b[k : k+int(l)])
		b = b[k+int(l):]
		seq, k2 := binary.Uvarint(b)
		if k2 <= 0 || seq > 1<<62 {
			return 0, nil, errCursor
		}
		b = b[k2:]
		if err := protocol.ValidName("room", name); err != nil {
			return 0, nil, errCursor
		}
		if rooms == nil {
			rooms = map[string]int64{}
		}
		if len(rooms) >= admission.MaxRoomSince {
			return 0, nil, errCursor
		}
		rooms[name] = int64(seq)
	}
	return since, rooms, nil
}

// ResumeFromCursor sets since and room_since of a handshake's query from
// a cursor: the cursor's positions replace since and the room_since of
// the rooms it names (it is newer than the URL EventSource reconnects
// with); a room_since for another room stays.
func ResumeFromCursor(q url.Values, cursor string) error {
	since, rooms, err := ParseCursor(cursor)
	if err != nil {
		return err
	}
	q.Set("since", strconv.FormatInt(since, 10))
	old, err := admission.ParseRoomSince(q["room_since"], 0)
	if err != nil {
		return err
	}
	var rs []string
	for room, seq := range old {
		if _, ok := rooms[room]; !ok {
			rs = append(rs, room+":"+strconv.FormatInt(seq, 10))
		}
	}
	for room, seq := range rooms {
		rs = append(rs, room+":"+strconv.FormatInt(seq, 10))
	}
	slices.Sort(rs)
	q["room_since"] = rs
	if len(rs) == 0 {
		q.Del("room_since")
	}
	return nil
}
