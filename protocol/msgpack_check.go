package protocol

import (
	"encoding/binary"
	"errors"
)

// Limits of a MessagePack value, checked before anything is decoded.
const (
	// MaxMsgpackDepth bounds the nesting of arrays and maps in a frame
	// (the frame's own map is the first level).
	MaxMsgpackDepth = 64
	// MaxMsgpackElements bounds the values in a frame, all levels counted.
	MaxMsgpackElements = 1 << 16
)

var (
	// errMsgpackLength: a declared length or count runs past the input.
	errMsgpackLength   = errors.New("a declared length runs past the end of the frame")
	errMsgpackDepth    = errors.New("nested more than 64 levels deep")
	errMsgpackElements = errors.New("more than 65536 values")
)

// checkMsgpack walks the first MessagePack object of b and refuses it
// when a string, binary, extension, array or map declares more than the
// bytes left, or when it nests or counts more than the limits above. The
// decoder allocates what a header declares (up to 1 MiB per value) before
// it notices the input is short, and recurses once per level: without
// this check a 12-byte frame costs the node a megabyte, and 64 KB of
// nested arrays a 32 MiB stack.
func checkMsgpack(b []byte) error {
	_, err := skipMsgpack(b, 0)
	return err
}

// skipMsgpack is the one walker over MessagePack values: it passes over
// the value at b[i:] and returns where it ends. It runs in time linear in
// the bytes it passes, on a fixed stack, without allocating.
func skipMsgpack(b []byte, i int) (int, error) {
	// open[d] is how many values are still to read at depth d.
	var open [MaxMsgpackDepth + 1]int
	depth, values := 0, 0
	open[0] = 1
	for {
		for open[depth] == 0 {
			if depth == 0 {
				return i, nil
			}
			depth--
		}
		open[depth]--
		if values++; values > MaxMsgpackElements {
			return i, errMsgpackElements
		}
		if i >= len(b) {
			return i, errMsgpackLength
		}
		c := b[i]
		i++
		var size, count int // bytes to skip, values contained
		container := false
		switch {
		case c <= 0x7f || c >= 0xe0 || c == 0xc0 || c == 0xc2 || c == 0xc3: // fixints, nil, bool
		case c <= 0x8f: // fixmap
			count, container = 2*int(c&0x0f), true
		case c <= 0x9f: // fixarray
			count, container = int(c&0x0f), true
		case c <= 0xbf: // fixstr
			size = int(c & 0x1f)
		default:
			var n int
			var err error
			if size, count, n, err = msgpackHeader(c, b[i:]); err != nil {
				return i, err
			}
			container = c >= 0xdc
			i += n
		}
		if size > len(b)-i || count > len(b)-i {
			return i, errMsgpackLength // every value takes at least one byte
		}
		i += size
		if container && count > 0 {
			if depth == MaxMsgpackDepth {
				return i, errMsgpackDepth
			}
			depth++
			open[depth] = count
		}
	}
}

// msgpackHeader decodes the rest of the header of a type byte c from
// 0xc1 to 0xdf: the payload bytes, the contained objects and the length
// of the header's own bytes after c.
func msgpackHeader(c byte, b []byte) (size, count, n int, err error) {
	length := func(w int) (int, error) {
		if len(b) < w {
			return 0, errMsgpackLength
		}
		switch w {
		case 1:
			return int(b[0]), nil
		case 2:
			return int(binary.BigEndian.Uint16(b)), nil
		default:
			return int(binary.BigEndian.Uint32(b)), nil
		}
	}
	switch c {
	case 0xc4, 0xc5, 0xc6: // bin 8/16/32
		w := 1 << (c - 0xc4)
		size, err = length(w)
		return size, 0, w, err
	case 0xc7, 0xc8, 0xc9: // ext 8/16/32: length, then a type byte
		w := 1 << (c - 0xc7)
		size, err = length(w)
		return size + 1, 0, w, err
	case 0xca, 0xce, 0xd2: // float32, uint32, int32
		return 4, 0, 0, nil
	case 0xcb, 0xcf, 0xd3: // float64, uint64, int64
		return 8, 0, 0, nil
	case 0xcc, 0xd0: // uint8, int8
		return 1, 0, 0, nil
	case 0xcd, 0xd1: // uint16, int16
		return 2, 0, 0, nil
	case 0xd4, 0xd5, 0xd6, 0xd7, 0xd8: // fixext 1/2/4/8/16, plus the type byte
		return 1 + 1<<(c-0xd4), 0, 0, nil
	case 0xd9, 0xda, 0xdb: // str 8/16/32
		w := 1 << (c - 0xd9)
		size, err = length(w)
		return size, 0, w, err
	case 0xdc, 0xdd: // array 16/32
		w := 2 << (c - 0xdc)
		count, err = length(w)
		return 0, count, w, err
	case 0xde, 0xdf: // map 16/32
		w := 2 << (c - 0xde)
		count, err = length(w)
		return 0, 2 * count, w, err
	}
	return 0, 0, 0, errors.New("invalid MessagePack type byte 0xc1")
}
