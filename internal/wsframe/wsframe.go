// Package wsframe reads and writes RFC 6455 frames on byte slices, for the
// gateway's event loop: the loop reads whatever the socket has into one
// shared buffer and parses every complete frame in place, so no reader or
// buffer stays attached to an idle connection.
//
// Header parsing is written here (a dozen lines, no io.Reader, no
// allocation); it is fuzzed against github.com/gobwas/ws, whose masking
// (ws.Cipher) and handshake the gateway uses as they are.
package wsframe

import (
	"encoding/binary"
	"errors"
	"strings"
	"unicode/utf8"

	"github.com/gobwas/ws"
)

// Opcodes.
const (
	OpContinuation = 0x0
	OpText         = 0x1
	OpBinary       = 0x2
	OpClose        = 0x8
	OpPing         = 0x9
	OpPong         = 0xA
)

// MaxHeaderSize is the largest frame header (with mask).
const MaxHeaderSize = 14

// Header is one parsed frame header.
type Header struct {
	Fin    bool
	OpCode byte
	Masked bool
	Rsv1   bool // the per-message compressed bit (ParseHeaderDeflate only)
	Mask   [4]byte
	Length int64
}

// Protocol errors: the connection is closed with 1002.
var (
	ErrReservedBits   = errors.New("websocket: reserved bits set without an extension")
	ErrUnmasked       = errors.New("websocket: client frame not masked")
	ErrBadOpCode      = errors.New("websocket: unknown opcode")
	ErrControlTooLong = errors.New("websocket: control frame longer than 125 bytes")
	ErrControlFrag    = errors.New("websocket: fragmented control frame")
	ErrLength         = errors.New("websocket: invalid payload length")
	ErrCompressedBit  = errors.New("websocket: compressed bit on a control frame or a continuation")
)

// IsControl reports whether op is a control opcode.
func IsControl(op byte) bool { return op&0x8 != 0 }

// ParseHeader parses the header at the start of b. It returns the header
// and its size, or size 0 when b does not hold a whole header yet. Client
// frames must be masked (requireMask).
func ParseHeader(b []byte, requireMask bool) (h Header, size int, err error) {
	return parseHeader(b, requireMask, false)
}

// ParseHeaderDeflate is ParseHeader on a connection that negotiated
// permessage-deflate: RSV1 (Header.Rsv1) may be set on the first frame of
// a text or binary message, and is still refused on a control frame or a
// continuation (RFC 7692 §6).
func ParseHeaderDeflate(b []byte, requireMask bool) (h Header, size int, err error) {
	return parseHeader(b, requireMask, true)
}

// rsv1 is the per-message compressed bit of the first header byte.
const rsv1 = 0x40

func parseHeader(b []byte, requireMask, deflate bool) (h Header, size int, err error) {
	if len(b) < 2 {
		return h, 0, nil
	}
	b0, b1 := b[0], b[1]
	if b0&0x30 != 0 || (b0&rsv1 != 0 && !deflate) {
		return h, 0, ErrReservedBits
	}
	h.Fin = b0&0x80 != 0
	h.OpCode = b0 & 0x0f
	switch h.OpCode {
	case OpContinuation, OpText, OpBinary, OpClose, OpPing, OpPong:
	default:
		return h, 0, ErrBadOpCode
	}
	if h.Rsv1 = b0&rsv1 != 0; h.Rsv1 && (h.OpCode == OpContinuation || IsControl(h.OpCode)) {
		return h, 0, ErrCompressedBit
	}
	h.Masked = b1&0x80 != 0
	if requireMask && !h.Masked {
		return h, 0, ErrUnmasked
	}
	size = 2
	switch l := b1 & 0x7f; l {
	case 126:
		if len(b) < 4 {
			return h, 0, nil
		}
		h.Length = int64(binary.BigEndian.Uint16(b[2:4]))
		size = 4
	case 127:
		if len(b) < 10 {
			return h, 0, nil
		}
		v := binary.BigEndian.Uint64(b[2:10])
		if v>>63 != 0 {
			return h, 0, ErrLength
		}
		h.Length = int64(v)
		size = 10
	default:
		h.Length = int64(l)
	}
	if IsControl(h.OpCode) {
		if h.Length > 125 {
			return h, 0, ErrControlTooLong
		}
		if !h.Fin {
			return h, 0, ErrControlFrag
		}
	}
	if h.Masked {
		if len(b) < size+4 {
			return h, 0, nil
		}
		copy(h.Mask[:], b[size:size+4])
		size += 4
	}
	return h, size, nil
}

// Unmask applies the frame mask to payload in place.
func Unmask(payload []byte, mask [4]byte) { ws.Cipher(payload, mask, 0) }

// HeaderSize is the size of an unmasked server frame header for n bytes.
func HeaderSize(n int) int {
	switch {
	case n < 126:
		return 2
	case n <= 0xffff:
		return 4
	}
	return 10
}

// AppendHeader appends an unmasked, final server frame header.
func AppendHeader(dst []byte, op byte, n int) []byte {
	b0 := 0x80 | op
	switch {
	case n < 126:
		return append(dst, b0, byte(n))
	case n <= 0xffff:
		return append(dst, b0, 126, byte(n>>8), byte(n))
	}
	dst = append(dst, b0, 127)
	return binary.BigEndian.AppendUint64(dst, uint64(n))
}

// Frame builds one complete unmasked server frame: header and payload in
// a single slice, ready to be shared by every recipient.
func Frame(op byte, payload []byte) []byte {
	b := make([]byte, 0, HeaderSize(len(payload))+len(payload))
	b = AppendHeader(b, op, len(payload))
	return append(b, payload...)
}

// CloseFrame builds a close frame with code and reason. The reason is made
// valid UTF-8 and cut to the 123 bytes that fit, on a character boundary.
func CloseFrame(code int, reason string) []byte {
	reason = CloseReason(reason)
	p := make([]byte, 2, 2+len(reason))
	binary.BigEndian.PutUint16(p, uint16(code))
	return Frame(OpClose, append(p, reason...))
}

// PingFrame is an empty server ping.
var PingFrame = []byte{0x80 | OpPing, 0}

// MaxCloseReason is the longest close reason: a control frame's payload is
// at most 125 bytes, two of which are the code.
const MaxCloseReason = 123

// CloseReason returns reason as valid UTF-8 (invalid bytes left out) of at
// most MaxCloseReason bytes, cut on a character boundary.
func CloseReason(reason string) string {
	reason = strings.ToValidUTF8(reason, "")
	if len(reason) <= MaxCloseReason {
		return reason
	}
	cut := MaxCloseReason
	for cut > 0 && !utf8.RuneStart(reason[cut]) {
		cut--
	}
	return reason[:cut]
}

// ValidCloseCode reports whether a peer may send code in a close frame
// (RFC 6455 7.4: 1000-1003, 1007-1014 and the registered or private
// ranges 3000-4999).
func ValidCloseCode(code int) bool {
	switch {
	case code >= 1000 && code <= 1003, code >= 1007 && code <= 1014, code >= 3000 && code <= 4999:
		return true
	}
	return false
}
