package admission

import (
	"net/http"
	"net/url"
	"strconv"

	"github.com/wsgate/wsgate/internal/auth"
	"github.com/wsgate/wsgate/protocol"
)

// Params is an accepted handshake's parameters. It holds one slot of
// the per-IP connection limit until the connection takes it over or
// Release is called.
type Params struct {
	IP        string
	Claims    *auth.Claims
	Format    protocol.Format
	Since     int64
	HasSince  bool
	Device    string           // "" for the default device
	Proxy     []byte           // the WSGATE_CONNECT_URL request still to make (claims is nil until then)
	RoomSince map[string]int64 // room_since: reliable rooms to resume
	Deflate   bool             // permessage-deflate accepted
	Transport uint8            // the node's transport code (WebSocket, Pusher, SSE, HTTP streaming)
}

// ParseQuery reads the handshake's query parameters of contract section 3:
// format, since, device and room_since (at most maxRooms of them).
func (a *Params) ParseQuery(q url.Values, maxRooms int) *Refusal {
	var err error
	if a.Format, err = protocol.ParseFormat(q.Get("format")); err != nil {
		return Refuse(http.StatusBadRequest, "bad_request", err.Error())
	}
	if s := q.Get("since"); s != "" {
		v, err := strconv.ParseInt(s, 10, 64)
		if err != nil || v < 0 {
			return Refuse(http.StatusBadRequest, "bad_request", "since must be a non-negative integer, got "+strconv.Quote(s))
		}
		a.Since, a.HasSince = v, true
	}
	if d, ok := q["device"]; ok {
		if len(d) != 1 {
			return Refuse(http.StatusBadRequest, "bad_request", "device must be given once")
		}
		if err := protocol.ValidDevice(d[0]); err != nil {
			return Refuse(http.StatusBadRequest, "bad_request", err.Error())
		}
		if d[0] != protocol.DefaultDevice {
			a.Device = d[0]
		}
	}
	if a.RoomSince, err = ParseRoomSince(q["room_since"], maxRooms); err != nil {
		return Refuse(http.StatusBadRequest, "bad_request", err.Error())
	}
	return nil
}
