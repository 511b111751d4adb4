package admission

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/wsgate/wsgate/protocol"
)

// MaxRoomSince bounds the room_since parameters of one handshake (and
// the rooms of an SSE cursor).
const MaxRoomSince = 1000

// ParseRoomSince reads the room_since handshake parameters (contract 3):
// each is ROOM:SEQ, split at the last ':' (a room name may hold ':'), SEQ
// a non-negative integer. A room named twice keeps the lower seq (nothing
// the client asked for is skipped). At most most entries (the rooms a user
// may hold).
func ParseRoomSince(values []string, most int) (map[string]int64, error) {
	if len(values) == 0 {
		return nil, nil
	}
	if most > 0 && len(values) > most {
		return nil, fmt.Errorf("room_since: %d values, at most %d", len(values), most)
	}
	out := make(map[string]int64, len(values))
	for _, v := range values {
		i := strings.LastIndexByte(v, ':')
		if i < 0 {
			return nil, fmt.Errorf("room_since must be ROOM:SEQ, got %s", strconv.Quote(v))
		}
		room := v[:i]
		if err := protocol.ValidName("room_since room", room); err != nil {
			return nil, err
		}
		seq, err := strconv.ParseInt(v[i+1:], 10, 64)
		if err != nil || seq < 0 {
			return nil, fmt.Errorf("room_since seq must be a non-negative integer, got %s", strconv.Quote(v[i+1:]))
		}
		if prev, ok := out[room]; !ok || seq < prev {
			out[room] = seq
		}
	}
	return out, nil
}
