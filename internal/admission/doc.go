// Package admission decides whether a handshake becomes a connection
// (contract section 3), before any byte of the session is written: the
// client's address behind trusted proxies, the Origin, the handshake rate
// and the connections per IP, the query parameters (format, since,
// device, room_since), the client token (HS256 secrets, a public key, a
// JWKS key set, insecure mode's ?user=) or the connect proxy
// (WSGATE_CONNECT_URL, section 13), and the refusals with their status,
// error code and Retry-After.
//
// It knows no socket and no transport: the gateway's transports (its own
// accept path, net/http, TLS, SSE, HTTP streaming, Pusher) read a Request,
// ask a Checker, and write the Refusal's answer their own way. The
// cluster-wide check (connections per user) and the connection itself
// stay with the node.
package admission
