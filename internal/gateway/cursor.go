package gateway

import "github.com/wsgate/wsgate/internal/httpstream"

// cursorLocked is the connection's SSE cursor now (httpstream.Cursor):
// the id of an event with a seq, taken right after its stream moved.
func (c *conn) cursorLocked() string {
	var rooms []httpstream.RoomPos
	c.sess.Rooms(func(s *stream, pos int64) { rooms = append(rooms, httpstream.RoomPos{Room: s.Room(), Pos: pos}) })
	return httpstream.Cursor(c.sess.Pos(nil), rooms)
}
