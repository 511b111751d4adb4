package bench

import (
	"encoding/binary"
	"strconv"
)

// Every message the bench publishes carries in its data who sent it and
// when, so that each receiver computes the end-to-end latency and counts
// losses and duplicates exactly:
//
//	{"i":17,"r":"9f3a61c2","s":4,"t":1767225600123456789,"x":"xxxx…"}
//
// i is the message's index in its stream (0, 1, 2, … per broadcast, user
// or room), r the run id (messages of other runs or publishers are
// "foreign" and left out of the counts), s the stream, t the publish time
// in Unix nanoseconds and x padding up to --size bytes. The keys are in
// alphabetical order so that a MessagePack round trip, which sorts them,
// gives the same text.

// payload is a decoded message data object.
type payload struct {
	idx    uint64
	run    []byte // aliases the frame's data
	stream uint64
	ts     int64
}

// appendData appends the data object of one message, padded to size bytes
// when size is larger than the object without padding.
func appendData(dst []byte, run string, stream, idx uint64, ts int64, size int) []byte {
	start := len(dst)
	dst = append(dst, `{"i":`...)
	dst = strconv.AppendUint(dst, idx, 10)
	dst = append(dst, `,"r":"`...)
	dst = append(dst, run...)
	dst = append(dst, `","s":`...)
	dst = strconv.AppendUint(dst, stream, 10)
	dst = append(dst, `,"t":`...)
	dst = strconv.AppendInt(dst, ts, 10)
	dst = append(dst, `,"x":"`...)
	if pad := size - (len(dst) - start) - 2; pad > 0 {
		for range pad {
			dst = append(dst, 'x')
		}
	}
	return append(dst, `"}`...)
}

// parseData decodes the data object of a message without allocating. It
// reports false for anything that is not a bench object (other publishers'
// messages).
func parseData(b []byte) (p payload, ok bool) {
	i := skipWS(b, 0)
	if i >= len(b) || b[i] != '{' {
		return p, false
	}
	i++
	var seen uint8
	for {
		i = skipWS(b, i)
		if i >= len(b) {
			return p, false
		}
		if b[i] == '}' {
			break
		}
		if seen != 0 {
			if b[i] != ',' {
				return p, false
			}
			i = skipWS(b, i+1)
		}
		// key
		if i >= len(b) || b[i] != '"' {
			return p, false
		}
		ks := i + 1
		for i = ks; i < len(b) && b[i] != '"'; i++ {
			if b[i] == '\\' {
				return p, false
			}
		}
		if i >= len(b) {
			return p, false
		}
		key := b[ks:i]
		i = skipWS(b, i+1)
		if i >= len(b) || b[i] != ':' {
			return p, false
		}
		i = skipWS(b, i+1)
		if i >= len(b) {
			return p, false
		}
		seen |= 0x80
		if b[i] == '"' {
			vs := i + 1
			for i = vs; i < len(b) && b[i] != '"'; i++ {
				if b[i] == '\\' {
					i++
				}
			}
			if i >= len(b) {
				return p, false
			}
			if len(key) == 1 && key[0] == 'r' {
				p.run = b[vs:i]
				seen |= 1
			}
			i++
			continue
		}
		neg := false
		if b[i] == '-' {
			neg = true
			i++
		}
		ds := i
		var v uint64
		for ; i < len(b) && b[i] >= '0' && b[i] <= '9'; i++ {
			v = v*10 + uint64(b[i]-'0')
		}
		if i == ds || i-ds > 19 {
			return p, false
		}
		if i < len(b) && (b[i] == '.' || b[i] == 'e' || b[i] == 'E') {
			return p, false // the bench writes integers only
		}
		if len(key) != 1 {
			continue
		}
		switch key[0] {
		case 'i':
			p.idx, seen = v, seen|2
		case 's':
			p.stream, seen = v, seen|4
		case 't':
			p.ts, seen = int64(v), seen|8
			if neg {
				p.ts = -p.ts
			}
		}
	}
	return p, seen&0x0f == 0x0f
}

func skipWS(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// parseDataMsgpack is parseData for the MessagePack form of the data
// object (what a gateway sends on a format=msgpack connection): a map
// with the same keys, integers in any width, strings. Like parseData it
// reports false for anything else, without allocating.
func parseDataMsgpack(b []byte) (p payload, ok bool) {
	i := 0
	n, i, ok := mpMapLen(b, i)
	if !ok {
		return p, false
	}
	var seen uint8
	for range n {
		var key []byte
		if key, i, ok = mpStr(b, i); !ok || i >= len(b) {
			return p, false
		}
		if c := b[i]; c >= 0xa0 && c <= 0xbf || c >= 0xd9 && c <= 0xdb {
			var v []byte
			if v, i, ok = mpStr(b, i); !ok {
				return p, false
			}
			if len(key) == 1 && key[0] == 'r' {
				p.run, seen = v, seen|1
			}
			continue
		}
		var v int64
		if v, i, ok = mpInt(b, i); !ok {
			return p, false
		}
		if len(key) != 1 {
			continue
		}
		u := uint64(v)
		if v < 0 {
			u = uint64(-v) // as parseData, which reads the digits only
		}
		switch key[0] {
		case 'i':
			p.idx, seen = u, seen|2
		case 's':
			p.stream, seen = u, seen|4
		case 't':
			p.ts, seen = v, seen|8
		}
	}
	return p, seen == 0x0f
}

// mpMapLen reads a MessagePack map header at b[i].
func mpMapLen(b []byte, i int) (n, next int, ok bool) {
	if i >= len(b) {
		return 0, i, false
	}
	switch c := b[i]; {
	case c >= 0x80 && c <= 0x8f:
		return int(c & 0x0f), i + 1, true
	case c == 0xde && len(b)-i >= 3:
		return int(binary.BigEndian.Uint16(b[i+1:])), i + 3, true
	case c == 0xdf && len(b)-i >= 5:
		return int(binary.BigEndian.Uint32(b[i+1:])), i + 5, true
	}
	return 0, i, false
}

// mpStr reads a MessagePack string at b[i].
func mpStr(b []byte, i int) (s []byte, next int, ok bool) {
	if i >= len(b) {
		return nil, i, false
	}
	var n, h int
	switch c := b[i]; {
	case c >= 0xa0 && c <= 0xbf:
		n, h = int(c&0x1f), 1
	case c == 0xd9 && len(b)-i >= 2:
		n, h = int(b[i+1]), 2
	case c == 0xda && len(b)-i >= 3:
		n, h = int(binary.BigEndian.Uint16(b[i+1:])), 3
	case c == 0xdb && len(b)-i >= 5:
		n, h = int(binary.BigEndian.Uint32(b[i+1:])), 5
	default:
		return nil, i, false
	}
	if len(b)-i-h < n {
		return nil, i, false
	}
	return b[i+h : i+h+n], i + h + n, true
}

// mpInt reads a MessagePack integer at b[i] (a uint64 above the int64
// range is refused).
func mpInt(b []byte, i int) (v int64, next int, ok bool) {
	if i >= len(b) {
		return 0, i, false
	}
	c := b[i]
	if c <= 0x7f || c >= 0xe0 {
		return int64(int8(c)), i + 1, true
	}
	var size int
	switch c {
	case 0xcc, 0xd0:
		size = 1
	case 0xcd, 0xd1:
		size = 2
	case 0xce, 0xd2:
		size = 4
	case 0xcf, 0xd3:
		size = 8
	default:
		return 0, i, false
	}
	if len(b)-i-1 < size {
		return 0, i, false
	}
	x := b[i+1 : i+1+size]
	switch c {
	case 0xcc:
		v = int64(x[0])
	case 0xd0:
		v = int64(int8(x[0]))
	case 0xcd:
		v = int64(binary.BigEndian.Uint16(x))
	case 0xd1:
		v = int64(int16(binary.BigEndian.Uint16(x)))
	case 0xce:
		v = int64(binary.BigEndian.Uint32(x))
	case 0xd2:
		v = int64(int32(binary.BigEndian.Uint32(x)))
	case 0xcf:
		u := binary.BigEndian.Uint64(x)
		if u > 1<<63-1 {
			return 0, i, false
		}
		v = int64(u)
	case 0xd3:
		v = int64(binary.BigEndian.Uint64(x))
	}
	return v, i + 1 + size, true
}
