// Package protocol is the wire protocol of wsgate, version 1: the frames a
// client and a gateway exchange over a WebSocket, their JSON and
// MessagePack encodings, and the close codes. It is shared by the gateway,
// the Go client and the load generator; docs/protocol.md is its prose form.
//
// Flow of a connection:
//
//	client                                   gateway
//	  GET /ws (token, since,          --->     checks before the upgrade
//	    room_since=ROOM:N..., format)
//	                                  <---     welcome {conn_id,node,user,ping_interval_ms,inbox_seq,rooms}
//	                                  <---     gap {from,to,missed}        (resume only, at most one)
//	                                  <---     message {.., seq}           (replayed reliable messages)
//	                                  <---     gap {.., target}, message {.., seq, target}
//	                                                                       (each resumed reliable room)
//	                                  <---     message ...                 (live)
//	  ack {seq}                       --->     cumulative; trims the inbox
//	  ping {ts}                       --->
//	                                  <---     pong {ts}
//	  join/leave/publish {id, ..}     --->     (join {id,room,since}: the room's
//	                                           kept messages above since first)
//	                                  <---     reply {id, ok, error?}
//	                                  <---     expiring {exp}              (30 s before the token's exp)
//	  refresh {id, token}             --->     same sub: exp and grants replaced
//	                                  <---     reply {id, ok, error?}      (else close 4401 at exp)
//	                                  <---     redirect {url,...} + close 4001 (drain)
//
// Text frames carry one JSON object; with format=msgpack, binary frames
// carry the same object in MessagePack. Unknown fields are ignored.
package protocol
