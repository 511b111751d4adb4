package client

import (
	"bytes"
	"errors"

	"github.com/gobwas/httphead"
	"github.com/gobwas/ws"
	"github.com/gobwas/ws/wsflate"
	"github.com/gobwas/ws/wsutil"

	"github.com/wsgate/wsgate/internal/wsframe"
)

// permessage-deflate (RFC 7692), without context takeover either way, as
// the gateway does it (contract §14): offered with DialOptions.Compression.

// rsv1 is the per-message compressed bit, in the first header byte.
const rsv1 = 0x40

// deflateOffer is the extension Dial offers.
func deflateOffer() httphead.Option {
	return wsflate.Parameters{ServerNoContextTakeover: true, ClientNoContextTakeover: true}.Option()
}

// deflateAccepted reports whether the server's extensions accept the
// offer; an answer that breaks RFC 7692 (or drops the
// server_no_context_takeover the offer asked for) fails the dial.
func deflateAccepted(exts []httphead.Option) (bool, error) {
	for _, e := range exts {
		if bytes.Equal(e.Name, wsflate.ExtensionNameBytes) {
			if err := wsframe.CheckDeflateResponse(e); err != nil {
				return false, err
			}
			return true, nil
		}
	}
	return false, nil
}

// inflate returns the inflated message z (a new slice), within the
// connection's message limit.
func (c *Conn) inflate(z []byte) ([]byte, error) {
	p, err := wsframe.AppendInflate(nil, z, int(min(c.maxMsg, 1<<31-1)))
	switch {
	case errors.Is(err, wsframe.ErrInflatedTooBig):
		return nil, wsutil.ErrMessageTooLarge
	case err != nil:
		return nil, ws.ProtocolError(err.Error())
	}
	c.msg = p // released with the message, as a large one is
	return p, nil
}

// Compressed reports whether the connection negotiated permessage-deflate.
func (c *Conn) Compressed() bool { return c.deflate }
