package wsframe

import (
	"bytes"
	"compress/flate"
	"errors"
	"io"
	"sync"

	"github.com/gobwas/httphead"
	"github.com/gobwas/ws/wsflate"
)

// permessage-deflate (RFC 7692) without context takeover in either
// direction: every message is compressed and inflated on its own, by a
// compressor or decompressor borrowed from a pool for that message only,
// so a connection keeps no compression state between messages.

// DeflateResponse is the extension a server answers an accepted offer
// with: no context takeover either way, and no window limit (the
// decompressor takes any window up to 32 KiB).
const DeflateResponse = "permessage-deflate; server_no_context_takeover; client_no_context_takeover"

// DeflateOffer is what a client offers: the same parameters, asked of the
// server (server_no_context_takeover) and promised by the client.
const DeflateOffer = DeflateResponse

// MinCompressSize is the smallest payload sent compressed: a smaller
// frame gains little and costs a compressor run.
const MinCompressSize = 512

// AcceptDeflate reports whether one of the Sec-WebSocket-Extensions values
// of a request offers permessage-deflate in a form a server answering
// DeflateResponse may accept: the first such offer wins, in the client's
// order of preference. An offer is declined (RFC 7692 §5, §7.1) when a
// parameter is unknown, repeated or has a bad value, and when it asks for
// server_max_window_bits below 15 (the compressor always uses a 32 KiB
// window). A value that is not a well-formed extension list offers
// nothing. It never fails the handshake: what it does not accept is
// simply not negotiated.
func AcceptDeflate(values [][]byte) bool {
	for _, v := range values {
		if !wellFormed(v) {
			return false
		}
	}
	for _, v := range values {
		if acceptIn(v) {
			return true
		}
	}
	return false
}

// wellFormed reports whether v parses as an extension list.
func wellFormed(v []byte) bool {
	return httphead.ScanOptions(v, func(int, []byte, []byte, []byte) httphead.Control {
		return httphead.ControlContinue
	})
}

// acceptIn reports whether the extension list v holds an acceptable
// permessage-deflate offer.
func acceptIn(v []byte) bool {
	opts, ok := httphead.ParseOptions(v, nil)
	if !ok {
		return false
	}
	for _, o := range opts {
		if !bytes.Equal(o.Name, wsflate.ExtensionNameBytes) {
			continue
		}
		var p wsflate.Parameters
		if p.Parse(o) != nil {
			continue // declined; a later offer may do
		}
		if p.ServerMaxWindowBits.Defined() && p.ServerMaxWindowBits < 15 {
			continue
		}
		return true
	}
	return false
}

// CheckDeflateResponse checks a server's answer to DeflateOffer (the
// parsed extension): it must be permessage-deflate with valid parameters,
// including server_no_context_takeover, which the offer asked for.
func CheckDeflateResponse(opt httphead.Option) error {
	var p wsflate.Parameters
	if err := p.Parse(opt); err != nil {
		return err
	}
	if !p.ServerNoContextTakeover {
		return errors.New("wsflate: response without server_no_context_takeover")
	}
	return nil
}

// The 4 bytes a sync flush ends with, left off each compressed message
// (RFC 7692 §7.2.1) and put back to inflate it.
var deflateTail = []byte{0x00, 0x00, 0xff, 0xff}

// finalBlock is an empty final stored block: it tells the decompressor the
// message has ended.
var finalBlock = []byte{0x01, 0x00, 0x00, 0xff, 0xff}

type compressor struct {
	w   *flate.Writer
	buf bytes.Buffer
}

// compressors run at flate.BestSpeed: on a 2 KB JSON message
// (BenchmarkDeflateFrame) it took 15-19 us against 31-36 us for the
// default level, for an output about 10 % larger. A broadcast pays it once,
// but a replay pays it per connection.
var compressors = sync.Pool{New: func() any {
	c := &compressor{}
	c.w, _ = flate.NewWriter(&c.buf, flate.BestSpeed) // never fails for a valid level
	return c
}}

// AppendDeflate appends payload compressed as one permessage-deflate
// message (the sync flush tail left off) to dst.
func AppendDeflate(dst, payload []byte) []byte {
	c := compressors.Get().(*compressor)
	c.buf.Reset()
	c.w.Reset(&c.buf)
	_, _ = c.w.Write(payload) // writes to a bytes.Buffer do not fail
	_ = c.w.Flush()
	out := c.buf.Bytes()
	out = bytes.TrimSuffix(out, deflateTail)
	dst = append(dst, out...)
	if c.buf.Cap() <= 64<<10 {
		compressors.Put(c)
	}
	return dst
}

// DeflateFrame builds one complete unmasked server frame of op whose
// payload is compressed (RSV1 set), ready to be shared by every recipient.
func DeflateFrame(op byte, payload []byte) []byte {
	z := AppendDeflate(nil, payload)
	b := make([]byte, 0, HeaderSize(len(z))+len(z))
	b = AppendHeader(b, op, len(z))
	b[0] |= rsv1
	return append(b, z...)
}

// ErrInflatedTooBig is a compressed message that inflates beyond the
// limit it was read with.
var ErrInflatedTooBig = errors.New("websocket: inflated message too big")

// ErrInflate is a compressed message that does not inflate.
var ErrInflate = errors.New("websocket: compressed message does not inflate")

type decompressor struct {
	mr multi
	r  io.ReadCloser
}

// multi reads the message, then the tail and the final block, without
// the allocations of io.MultiReader.
type multi struct {
	parts [3][]byte
}

func (m *multi) Read(p []byte) (int, error) {
	for i := range m.parts {
		if len(m.parts[i]) > 0 {
			n := copy(p, m.parts[i])
			m.parts[i] = m.parts[i][n:]
			return n, nil
		}
	}
	return 0, io.EOF
}

func (m *multi) ReadByte() (byte, error) {
	for i := range m.parts {
		if len(m.parts[i]) > 0 {
			b := m.parts[i][0]
			m.parts[i] = m.parts[i][1:]
			return b, nil
		}
	}
	return 0, io.EOF
}

var decompressors = sync.Pool{New: func() any { return &decompressor{} }}

// AppendInflate appends the inflated compressed message z to dst. It
// fails with ErrInflatedTooBig as soon as more than limit bytes come
// out (a deflate bomb costs at most limit bytes), and with ErrInflate
// when z is not a valid deflate stream.
func AppendInflate(dst, z []byte, limit int) ([]byte, error) {
	d := decompressors.Get().(*decompressor)
	defer decompressors.Put(d)
	d.mr.parts = [3][]byte{z, deflateTail, finalBlock}
	if d.r == nil {
		d.r = flate.NewReader(&d.mr)
	} else if err := d.r.(flate.Resetter).Reset(&d.mr, nil); err != nil {
		return dst, ErrInflate
	}
	start := len(dst)
	for {
		if len(dst) == cap(dst) {
			dst = append(dst, 0)[:len(dst)]
		}
		room := dst[len(dst):cap(dst)]
		if over := start + limit + 1 - len(dst); len(room) > over {
			room = room[:over]
		}
		n, err := d.r.Read(room)
		dst = dst[:len(dst)+n]
		if len(dst)-start > limit {
			d.mr.parts = [3][]byte{}
			return dst[:start], ErrInflatedTooBig
		}
		if err == io.EOF {
			d.mr.parts = [3][]byte{}
			return dst, nil
		}
		if err != nil {
			d.mr.parts = [3][]byte{}
			return dst[:start], ErrInflate
		}
	}
}
