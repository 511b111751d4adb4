package api

// jsonScan walks valid JSON.
type jsonScan struct {
	b []byte
	i int
}

func (p *jsonScan) space() {
	for p.i < len(p.b) {
		switch p.b[p.i] {
		case ' ', '\t', '\n', '\r':
			p.i++
		default:
			return
		}
	}
}

// byte consumes c (after white space) if it comes next.
func (p *jsonScan) byte(c byte) bool {
	p.space()
	if p.i < len(p.b) && p.b[p.i] == c {
		p.i++
		return true
	}
	return false
}

func (p *jsonScan) literal(s string) bool {
	p.space()
	if len(p.b)-p.i >= len(s) && string(p.b[p.i:p.i+len(s)]) == s {
		p.i += len(s)
		return true
	}
	return false
}

// plainString reads a string of printable ASCII without escapes; anything
// else (escapes, other bytes, not a string) reports false.
func (p *jsonScan) plainString() (string, bool) {
	p.space()
	if p.i >= len(p.b) || p.b[p.i] != '"' {
		return "", false
	}
	for j := p.i + 1; j < len(p.b); j++ {
		switch c := p.b[j]; {
		case c == '"':
			s := string(p.b[p.i+1 : j])
			p.i = j + 1
			return s, true
		case c == '\\' || c < 0x20 || c >= 0x7f:
			return "", false
		}
	}
	return "", false
}

// value returns the next value (any type) as it stands in the input.
func (p *jsonScan) value() ([]byte, bool) {
	p.space()
	start := p.i
	depth := 0
	for p.i < len(p.b) {
		switch c := p.b[p.i]; c {
		case '"':
			p.i++
			for p.i < len(p.b) && p.b[p.i] != '"' {
				if p.b[p.i] == '\\' {
					p.i++
				}
				p.i++
			}
			p.i++
		case '{', '[':
			depth++
			p.i++
		case '}', ']':
			if depth == 0 {
				return p.b[start:p.i], p.i > start
			}
			depth--
			p.i++
		case ',', ' ', '\t', '\n', '\r':
			if depth == 0 {
				return p.b[start:p.i], p.i > start
			}
			p.i++
		default:
			p.i++
		}
		if depth == 0 && p.i > start && (p.b[start] == '"' || p.b[start] == '{' || p.b[start] == '[') {
			return p.b[start:p.i], true
		}
	}
	return p.b[start:min(p.i, len(p.b))], p.i > start && p.i <= len(p.b) && depth == 0
}
