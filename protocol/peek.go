package protocol

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"math"
	"strconv"
	"unicode/utf8"
)

// ServerPeek is what PeekServer pulls out of a server frame: the fields a
// receiver needs to route and account for a frame, without decoding the
// rest. ID and Data alias the frame's bytes and are valid as long as they
// are.
type ServerPeek struct {
	// Type is the frame's type: one of the Type constants (no allocation)
	// or, for a type this package does not know, a copy of it.
	Type string
	// ID is the message or reply id (nil when absent).
	ID []byte
	// Seq is the reliable sequence number of a message or reply (0 when
	// absent).
	Seq int64
	// TS is the publish time of a message in Unix ms, or the ts a pong
	// echoes (0 when absent).
	TS float64
	// Data is the message's data in the frame's own format: the JSON text
	// of a JSON frame (null included), the MessagePack value of a
	// MessagePack frame (nil when absent or nil, as DecodeServer leaves
	// it). MsgpackToJSON turns the latter into what DecodeServer returns.
	Data []byte
}

// ErrNotPeekable is returned by PeekServer for a frame it does not read
// exactly like DecodeServer would (for example a JSON key written with
// escapes); decode such a frame with DecodeServer.
var ErrNotPeekable = errors.New("protocol: frame needs the full decoder")

// PeekServer reads the type, id, seq, ts and data of one server frame
// without allocating (except for an escaped id or an unknown type) and
// without converting anything. It is the hot path of a receiver that gets
// many frames and decodes only the rare ones it needs in full (welcome,
// gap, redirect, error) with DecodeServer.
//
// For the frames a gateway writes, PeekServer and DecodeServer agree. For
// any input, when both succeed they agree on Type, ID, Seq, TS and Data.
// A JSON frame is checked as strictly as DecodeServer checks it (syntax,
// and the JSON type of every ServerFrame field), so PeekServer fails
// whenever DecodeServer does; it may also fail with ErrNotPeekable where
// DecodeServer succeeds. A MessagePack frame is checked for structure and
// for the fields PeekServer returns only.
func PeekServer(f Format, b []byte) (ServerPeek, error) {
	if f == MsgPack {
		return peekMsgpack(b)
	}
	return peekJSON(b)
}

var (
	errPeekSyntax  = errors.New("protocol: invalid JSON server frame")
	errPeekType    = errors.New("protocol: server frame field of the wrong type")
	errPeekNoType  = errors.New("server frame has no type")
	errPeekMsgpack = errors.New("protocol: invalid MessagePack server frame")
)

// maxPeekDepth is encoding/json's nesting limit.
const maxPeekDepth = 10000

// jsonKind is what a ServerFrame field accepts.
type jsonKind uint8

const (
	kindUnknown jsonKind = iota // not a field: any value
	kindString
	kindInt
	kindFloat
	kindBool
	kindRaw        // json.RawMessage: any value
	kindTarget     // *Target: object or null
	kindErrorBody  // *ErrorBody: object or null
	kindNestString // a string field of Target or ErrorBody
)

// field numbers of the values PeekServer keeps.
const (
	fOther uint8 = iota
	fType
	fID
	fSeq
	fTS
	fData
)

type jsonField struct {
	name string
	kind jsonKind
	keep uint8
}

// serverFields are the JSON names of ServerFrame's fields.
var serverFields = [...]jsonField{
	{"type", kindString, fType},
	{"id", kindString, fID},
	{"event", kindString, fOther},
	{"data", kindRaw, fData},
	{"ts", kindFloat, fTS},
	{"target", kindTarget, fOther},
	{"seq", kindInt, fSeq},
	{"conn_id", kindString, fOther},
	{"node", kindString, fOther},
	{"user", kindString, fOther},
	{"ping_interval_ms", kindInt, fOther},
	{"inbox_seq", kindInt, fOther},
	{"ok", kindBool, fOther},
	{"error", kindErrorBody, fOther},
	{"from", kindRaw, fOther}, // a number in gap, a string (the sender) in message
	{"to", kindInt, fOther},
	{"missed", kindInt, fOther},
	{"url", kindString, fOther},
	{"reason", kindString, fOther},
	{"retry_after_ms", kindInt, fOther},
	{"code", kindString, fOther},
	{"message", kindString, fOther},
}

var (
	targetFields = [...]jsonField{{"type", kindNestString, fOther}, {"id", kindNestString, fOther}}
	errorFields  = [...]jsonField{{"code", kindNestString, fOther}, {"message", kindNestString, fOther}}
)

// lookupField finds key among fields as encoding/json does: an exact
// match first, else a case-insensitive one (bytes.EqualFold is the
// folding encoding/json uses).
func lookupField(fields []jsonField, key []byte) (jsonField, bool) {
	if len(fields) == len(serverFields) {
		// The frame's own members, the hot path: a switch finds the exact
		// names faster than a scan.
		if k := serverFieldIndex(key); k >= 0 {
			return serverFields[k], true
		}
	} else {
		for _, f := range fields {
			if string(key) == f.name {
				return f, true
			}
		}
	}
	for _, f := range fields {
		if bytes.EqualFold(key, []byte(f.name)) {
			return f, true
		}
	}
	return jsonField{}, false
}

// serverFieldIndex is the index in serverFields of the exact name key,
// or -1.
func serverFieldIndex(key []byte) int {
	switch string(key) {
	case "type":
		return 0
	case "id":
		return 1
	case "event":
		return 2
	case "data":
		return 3
	case "ts":
		return 4
	case "target":
		return 5
	case "seq":
		return 6
	case "conn_id":
		return 7
	case "node":
		return 8
	case "user":
		return 9
	case "ping_interval_ms":
		return 10
	case "inbox_seq":
		return 11
	case "ok":
		return 12
	case "error":
		return 13
	case "from":
		return 14
	case "to":
		return 15
	case "missed":
		return 16
	case "url":
		return 17
	case "reason":
		return 18
	case "retry_after_ms":
		return 19
	case "code":
		return 20
	case "message":
		return 21
	}
	return -1
}

// jsonPeek collects the kept values while a JSON frame is checked.
type jsonPeek struct {
	p                     ServerPeek
	typ                   []byte
	typEscaped, idEscaped bool
}

// keep takes the value v of a checked field (nil for null; the content of
// a string; the whole value otherwise).
func (st *jsonPeek) keep(fl jsonField, v []byte, escaped bool) error {
	switch fl.keep {
	case fType:
		if v != nil {
			st.typ, st.typEscaped = v, escaped
		}
	case fID:
		if v != nil {
			st.p.ID, st.idEscaped = v, escaped
		}
	case fSeq:
		if v != nil {
			n, ok := parseJSONInt(v)
			if !ok {
				return errPeekType
			}
			st.p.Seq = n
		}
	case fTS:
		if v != nil {
			x, ok := parseJSONFloat(v)
			if !ok {
				return errPeekType
			}
			st.p.TS = x
		}
	case fData:
		st.p.Data = v
	}
	return nil
}

func peekJSON(b []byte) (ServerPeek, error) {
	i := skipSpace(b, 0)
	if i >= len(b) || b[i] != '{' {
		// null decodes to a frame without type; anything else is refused.
		if end, err := skipValue(b, i, 0); err != nil || skipSpace(b, end) != len(b) {
			return ServerPeek{}, errPeekSyntax
		}
		if b[i] == 'n' {
			return ServerPeek{}, errPeekNoType
		}
		return ServerPeek{}, errPeekType
	}
	var st jsonPeek
	i, err := scanObject(b, i, 1, serverFields[:], &st)
	if err != nil {
		return ServerPeek{}, err
	}
	if skipSpace(b, i) != len(b) {
		return ServerPeek{}, errPeekSyntax
	}
	p := st.p
	typ := st.typ
	if st.typEscaped {
		s, err := unquote(typ)
		if err != nil {
			return ServerPeek{}, err
		}
		typ = []byte(s)
	}
	if len(typ) == 0 {
		return ServerPeek{}, errPeekNoType
	}
	p.Type = internType(typ)
	if st.idEscaped {
		s, err := unquote(p.ID)
		if err != nil {
			return ServerPeek{}, err
		}
		p.ID = []byte(s)
	}
	return p, nil
}

// internType returns the Type constant equal to t, or a copy of t.
func internType(t []byte) string {
	switch string(t) {
	case TypeMessage:
		return TypeMessage
	case TypePong:
		return TypePong
	case TypeReply:
		return TypeReply
	case TypeWelcome:
		return TypeWelcome
	case TypeGap:
		return TypeGap
	case TypeRedirect:
		return TypeRedirect
	case TypeError:
		return TypeError
	}
	return string(t)
}

// unquote decodes the content of a JSON string (escapes, invalid UTF-8)
// exactly as encoding/json does.
func unquote(content []byte) (string, error) {
	q := make([]byte, 0, len(content)+2)
	q = append(q, '"')
	q = append(q, content...)
	q = append(q, '"')
	var s string
	if err := json.Unmarshal(q, &s); err != nil {
		return "", errPeekSyntax
	}
	return s, nil
}

// scanObject checks the object starting at b[i] == '{': its syntax, and
// the members named in fields against their kinds, handing their values
// to st. It returns the index after the object.
func scanObject(b []byte, i, depth int, fields []jsonField, st *jsonPeek) (int, error) {
	if depth > maxPeekDepth {
		return 0, errPeekSyntax
	}
	i = skipSpace(b, i+1)
	if i < len(b) && b[i] == '}' {
		return i + 1, nil
	}
	for {
		if i >= len(b) || b[i] != '"' {
			return 0, errPeekSyntax
		}
		ks := i + 1
		end, esc, err := scanString(b, i)
		if err != nil {
			return 0, err
		}
		if esc {
			return 0, ErrNotPeekable // an escaped key: leave the matching to encoding/json
		}
		key := b[ks : end-1]
		i = skipSpace(b, end)
		if i >= len(b) || b[i] != ':' {
			return 0, errPeekSyntax
		}
		i = skipSpace(b, i+1)
		fl, known := lookupField(fields, key)
		if !known {
			if i, err = skipValue(b, i, depth); err != nil {
				return 0, err
			}
		} else if i, err = checkValue(b, i, depth, fl, st); err != nil {
			return 0, err
		}
		i = skipSpace(b, i)
		if i >= len(b) {
			return 0, errPeekSyntax
		}
		switch b[i] {
		case ',':
			i = skipSpace(b, i+1)
		case '}':
			return i + 1, nil
		default:
			return 0, errPeekSyntax
		}
	}
}

// checkValue checks the value at b[i] against the field's kind and hands
// it to st; it returns the index after the value.
func checkValue(b []byte, i, depth int, fl jsonField, st *jsonPeek) (int, error) {
	if i >= len(b) {
		return 0, errPeekSyntax
	}
	start := i
	c := b[start]
	if c == '{' && (fl.kind == kindTarget || fl.kind == kindErrorBody) {
		nested := targetFields[:]
		if fl.kind == kindErrorBody {
			nested = errorFields[:]
		}
		return scanObject(b, start, depth+1, nested, st)
	}
	end, err := skipValue(b, i, depth)
	if err != nil {
		return 0, err
	}
	if fl.kind == kindRaw {
		return end, st.keep(fl, b[start:end], false)
	}
	if c == 'n' { // null leaves a field as it is
		if fl.kind == kindNestString {
			return end, nil
		}
		return end, st.keep(fl, nil, false)
	}
	switch fl.kind {
	case kindString, kindNestString:
		if c != '"' {
			return 0, errPeekType
		}
		content := b[start+1 : end-1]
		if fl.kind == kindNestString {
			return end, nil
		}
		return end, st.keep(fl, content, needsUnquote(content))
	case kindInt:
		if c != '-' && (c < '0' || c > '9') {
			return 0, errPeekType
		}
		if _, ok := parseJSONInt(b[start:end]); !ok {
			return 0, errPeekType
		}
	case kindFloat:
		if c != '-' && (c < '0' || c > '9') {
			return 0, errPeekType
		}
		if _, ok := parseJSONFloat(b[start:end]); !ok {
			return 0, errPeekType
		}
	case kindBool:
		if c != 't' && c != 'f' {
			return 0, errPeekType
		}
	case kindTarget, kindErrorBody:
		return 0, errPeekType // not an object (objects are handled above)
	}
	return end, st.keep(fl, b[start:end], false)
}

// needsUnquote reports whether a string's content differs from its
// decoded value: escapes or invalid UTF-8.
func needsUnquote(s []byte) bool {
	for i, c := range s {
		if c == '\\' {
			return true
		}
		if c >= utf8.RuneSelf {
			return !utf8.Valid(s[i:])
		}
	}
	return false
}

func skipSpace(b []byte, i int) int {
	for i < len(b) {
		switch b[i] {
		case ' ', '\t', '\n', '\r':
			i++
		default:
			return i
		}
	}
	return i
}

// scanString checks the string starting at b[i] == '"' and returns the
// index after its closing quote and whether it contains escapes.
func scanString(b []byte, i int) (end int, escaped bool, err error) {
	i++
	for i < len(b) {
		c := b[i]
		switch {
		case c == '"':
			return i + 1, escaped, nil
		case c == '\\':
			escaped = true
			if i+1 >= len(b) {
				return 0, false, errPeekSyntax
			}
			switch b[i+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				i += 2
			case 'u':
				if i+6 > len(b) {
					return 0, false, errPeekSyntax
				}
				for _, h := range b[i+2 : i+6] {
					if !isHex(h) {
						return 0, false, errPeekSyntax
					}
				}
				i += 6
			default:
				return 0, false, errPeekSyntax
			}
		case c < 0x20:
			return 0, false, errPeekSyntax
		default:
			i++
		}
	}
	return 0, false, errPeekSyntax
}

func isHex(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F'
}

// skipValue checks the JSON value starting at b[i] and returns the index
// after it.
func skipValue(b []byte, i, depth int) (int, error) {
	if i >= len(b) {
		return 0, errPeekSyntax
	}
	switch c := b[i]; {
	case c == '"':
		end, _, err := scanString(b, i)
		return end, err
	case c == '{':
		return scanObject(b, i, depth+1, nil, nil)
	case c == '[':
		if depth+1 > maxPeekDepth {
			return 0, errPeekSyntax
		}
		i = skipSpace(b, i+1)
		if i < len(b) && b[i] == ']' {
			return i + 1, nil
		}
		for {
			var err error
			if i, err = skipValue(b, i, depth+1); err != nil {
				return 0, err
			}
			i = skipSpace(b, i)
			if i >= len(b) {
				return 0, errPeekSyntax
			}
			switch b[i] {
			case ',':
				i = skipSpace(b, i+1)
			case ']':
				return i + 1, nil
			default:
				return 0, errPeekSyntax
			}
		}
	case c == 't':
		return literal(b, i, "true")
	case c == 'f':
		return literal(b, i, "false")
	case c == 'n':
		return literal(b, i, "null")
	case c == '-' || c >= '0' && c <= '9':
		return scanNumber(b, i)
	}
	return 0, errPeekSyntax
}

func literal(b []byte, i int, lit string) (int, error) {
	if len(b)-i < len(lit) || string(b[i:i+len(lit)]) != lit {
		return 0, errPeekSyntax
	}
	return i + len(lit), nil
}

// scanNumber checks a JSON number: -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)?
func scanNumber(b []byte, i int) (int, error) {
	if b[i] == '-' {
		i++
	}
	switch {
	case i < len(b) && b[i] == '0':
		i++
	case i < len(b) && b[i] >= '1' && b[i] <= '9':
		for i < len(b) && b[i] >= '0' && b[i] <= '9' {
			i++
		}
	default:
		return 0, errPeekSyntax
	}
	if i < len(b) && b[i] == '.' {
		i++
		s := i
		for i < len(b) && b[i] >= '0' && b[i] <= '9' {
			i++
		}
		if i == s {
			return 0, errPeekSyntax
		}
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		s := i
		for i < len(b) && b[i] >= '0' && b[i] <= '9' {
			i++
		}
		if i == s {
			return 0, errPeekSyntax
		}
	}
	return i, nil
}

// parseJSONInt parses a JSON number literal as encoding/json decodes it
// into an int64 (strconv.ParseInt: no fraction, no exponent, in range).
func parseJSONInt(lit []byte) (int64, bool) {
	u, neg, ok := parseDigits(lit)
	if !ok {
		return 0, false
	}
	if neg {
		if u > 1<<63 {
			return 0, false
		}
		return -int64(u), true
	}
	if u > math.MaxInt64 {
		return 0, false
	}
	return int64(u), true
}

// parseDigits reads -?[0-9]+ into a uint64; false on anything else or
// overflow.
func parseDigits(lit []byte) (u uint64, neg bool, ok bool) {
	if len(lit) > 0 && lit[0] == '-' {
		neg, lit = true, lit[1:]
	}
	if len(lit) == 0 {
		return 0, false, false
	}
	for _, c := range lit {
		if c < '0' || c > '9' {
			return 0, false, false
		}
		d := uint64(c - '0')
		if u > (math.MaxUint64-d)/10 {
			return 0, false, false
		}
		u = u*10 + d
	}
	return u, neg, true
}

// parseJSONFloat parses a JSON number literal as encoding/json decodes it
// into a float64 (strconv.ParseFloat; out of range is an error).
func parseJSONFloat(lit []byte) (float64, bool) {
	if u, neg, ok := parseDigits(lit); ok {
		// An integer that fits in a uint64 converts with the same
		// rounding as ParseFloat (both round the exact value to nearest).
		x := float64(u)
		if neg {
			x = -x
		}
		return x, true
	}
	x, err := strconv.ParseFloat(string(lit), 64)
	return x, err == nil
}

// MessagePack.

func peekMsgpack(b []byte) (p ServerPeek, err error) {
	r := mpReader{b: b}
	n, ok := r.mapLen()
	if !ok {
		return p, errPeekMsgpack
	}
	if n < 0 {
		return p, errPeekNoType // nil decodes to a frame without type
	}
	for range n {
		key, ok := r.str()
		if !ok {
			return ServerPeek{}, errPeekMsgpack
		}
		start := r.i
		switch string(key) {
		case "type":
			v, ok := r.str()
			if !ok {
				return ServerPeek{}, errPeekMsgpack
			}
			p.Type = internType(v)
		case "id":
			v, ok := r.str()
			if !ok {
				return ServerPeek{}, errPeekMsgpack
			}
			p.ID = v
		case "seq":
			v, ok := r.int()
			if !ok {
				return ServerPeek{}, errPeekMsgpack
			}
			p.Seq = v
		case "ts":
			v, ok := r.float()
			if !ok {
				return ServerPeek{}, errPeekMsgpack
			}
			p.TS = v
		case "data":
			if !r.skip() {
				return ServerPeek{}, errPeekMsgpack
			}
			p.Data = b[start:r.i]
			if len(p.Data) == 1 && p.Data[0] == 0xc0 {
				p.Data = nil // nil sets the field to its zero value: no data
			}
		default:
			if !r.skip() {
				return ServerPeek{}, errPeekMsgpack
			}
		}
	}
	if p.Type == "" {
		return ServerPeek{}, errPeekNoType
	}
	return p, nil
}

// mpReader reads MessagePack values the way github.com/vmihailenco/msgpack
// decodes them into ServerFrame's fields.
type mpReader struct {
	b []byte
	i int
}

func (r *mpReader) byte() (byte, bool) {
	if r.i >= len(r.b) {
		return 0, false
	}
	c := r.b[r.i]
	r.i++
	return c, true
}

// n reads a big-endian unsigned integer of size bytes.
func (r *mpReader) n(size int) (uint64, bool) {
	if len(r.b)-r.i < size {
		return 0, false
	}
	var v uint64
	switch size {
	case 1:
		v = uint64(r.b[r.i])
	case 2:
		v = uint64(binary.BigEndian.Uint16(r.b[r.i:]))
	case 4:
		v = uint64(binary.BigEndian.Uint32(r.b[r.i:]))
	case 8:
		v = binary.BigEndian.Uint64(r.b[r.i:])
	}
	r.i += size
	return v, true
}

// mapLen reads a map header; -1 for nil.
func (r *mpReader) mapLen() (int, bool) {
	c, ok := r.byte()
	if !ok {
		return 0, false
	}
	switch {
	case c == 0xc0:
		return -1, true
	case c >= 0x80 && c <= 0x8f:
		return int(c & 0x0f), true
	case c == 0xde:
		v, ok := r.n(2)
		return int(v), ok
	case c == 0xdf:
		v, ok := r.n(4)
		return int(v), ok
	}
	return 0, false
}

// str reads a str, bin or nil as a string field does (nil: empty).
func (r *mpReader) str() ([]byte, bool) {
	c, ok := r.byte()
	if !ok {
		return nil, false
	}
	var n uint64
	switch {
	case c == 0xc0:
		return nil, true
	case c >= 0xa0 && c <= 0xbf:
		n = uint64(c & 0x1f)
	case c == 0xd9 || c == 0xc4:
		n, ok = r.n(1)
	case c == 0xda || c == 0xc5:
		n, ok = r.n(2)
	case c == 0xdb || c == 0xc6:
		n, ok = r.n(4)
	default:
		return nil, false
	}
	if !ok || uint64(len(r.b)-r.i) < n {
		return nil, false
	}
	s := r.b[r.i : r.i+int(n)]
	r.i += int(n)
	return s, true
}

// int reads an integer or nil as an int64 field does.
func (r *mpReader) int() (int64, bool) {
	c, ok := r.byte()
	if !ok {
		return 0, false
	}
	switch {
	case c == 0xc0:
		return 0, true
	case c <= 0x7f || c >= 0xe0:
		return int64(int8(c)), true
	case c == 0xcc:
		v, ok := r.n(1)
		return int64(v), ok
	case c == 0xd0:
		v, ok := r.n(1)
		return int64(int8(v)), ok
	case c == 0xcd:
		v, ok := r.n(2)
		return int64(v), ok
	case c == 0xd1:
		v, ok := r.n(2)
		return int64(int16(v)), ok
	case c == 0xce:
		v, ok := r.n(4)
		return int64(v), ok
	case c == 0xd2:
		v, ok := r.n(4)
		return int64(int32(v)), ok
	case c == 0xcf || c == 0xd3:
		v, ok := r.n(8)
		return int64(v), ok
	}
	return 0, false
}

// float reads a float, an integer or nil as a float64 field does.
func (r *mpReader) float() (float64, bool) {
	if r.i >= len(r.b) {
		return 0, false
	}
	switch r.b[r.i] {
	case 0xca:
		r.i++
		v, ok := r.n(4)
		return float64(math.Float32frombits(uint32(v))), ok
	case 0xcb:
		r.i++
		v, ok := r.n(8)
		return math.Float64frombits(v), ok
	}
	v, ok := r.int()
	return float64(v), ok
}

// skip passes over one complete value of any type (see skipMsgpack).
func (r *mpReader) skip() bool {
	end, err := skipMsgpack(r.b, r.i)
	r.i = end
	return err == nil
}
