package bench

import (
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

// minDataSize is the data length without padding for the largest numbers.
const minDataSize = len(`{"i":4294967295,"r":"01234567","s":4294967295,"t":9223372036854775807,"x":""}`)

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
