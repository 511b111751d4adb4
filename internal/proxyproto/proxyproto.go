// Package proxyproto reads the PROXY protocol header (HAProxy's, versions
// 1 and 2) that a TCP load balancer such as nginx `stream` with
// `proxy_protocol on` sends before the client's bytes, so that the
// gateway sees the client's address rather than the balancer's.
//
// It parses a byte slice, as the gateway's event loop reads one: Parse
// says how many bytes the header took, or that more are needed. The
// libraries that exist wrap a net.Conn, which the event loop does not
// have. Spec: https://www.haproxy.org/download/2.9/doc/proxy-protocol.txt
package proxyproto

import (
	"bytes"
	"encoding/binary"
	"errors"
	"net/netip"
	"strconv"
)

var (
	// ErrIncomplete means data is a prefix of a header: read more.
	ErrIncomplete = errors.New("proxyproto: header incomplete")
	// ErrInvalid means data starts like a header but is not a valid one.
	ErrInvalid = errors.New("proxyproto: invalid PROXY protocol header")
)

var (
	v1Prefix = []byte("PROXY ")
	v2Sig    = []byte("\r\n\r\n\x00\r\nQUIT\n")
)

const maxV1 = 107 // the longest v1 line, CRLF included

// Parse reads a header at the start of data. It returns the header's
// length and the source address it carries. n is 0 when data does not
// start with a header. src is the zero Addr for a v1 UNKNOWN or a v2
// LOCAL header (a health check of the balancer itself): keep the peer's.
func Parse(data []byte) (n int, src netip.Addr, err error) {
	switch {
	case startsWith(data, v1Prefix):
		return parseV1(data)
	case startsWith(data, v2Sig):
		return parseV2(data)
	case len(data) < len(v1Prefix) && bytes.HasPrefix(v1Prefix, data),
		len(data) < len(v2Sig) && bytes.HasPrefix(v2Sig, data):
		return 0, netip.Addr{}, ErrIncomplete
	}
	return 0, netip.Addr{}, nil
}

func startsWith(data, p []byte) bool { return len(data) >= len(p) && bytes.Equal(data[:len(p)], p) }

// parseV1: "PROXY TCP4|TCP6 src dst sport dport\r\n" or "PROXY UNKNOWN...\r\n".
func parseV1(data []byte) (int, netip.Addr, error) {
	end := bytes.Index(data[:min(len(data), maxV1)], []byte("\r\n"))
	if end < 0 {
		if len(data) >= maxV1 {
			return 0, netip.Addr{}, ErrInvalid
		}
		return 0, netip.Addr{}, ErrIncomplete
	}
	n := end + 2
	f := bytes.Split(data[len(v1Prefix):end], []byte{' '})
	if len(f) >= 1 && string(f[0]) == "UNKNOWN" {
		return n, netip.Addr{}, nil
	}
	if len(f) != 5 || (string(f[0]) != "TCP4" && string(f[0]) != "TCP6") {
		return 0, netip.Addr{}, ErrInvalid
	}
	src, err := netip.ParseAddr(string(f[1]))
	if err != nil || src.Zone() != "" || src.Is4() != (string(f[0]) == "TCP4") {
		return 0, netip.Addr{}, ErrInvalid
	}
	if _, err := netip.ParseAddr(string(f[2])); err != nil {
		return 0, netip.Addr{}, ErrInvalid
	}
	for _, p := range f[3:] {
		if v, err := strconv.ParseUint(string(p), 10, 16); err != nil || (len(p) > 1 && p[0] == '0') || v > 65535 {
			return 0, netip.Addr{}, ErrInvalid
		}
	}
	return n, src, nil
}

// parseV2: the binary header.
func parseV2(data []byte) (int, netip.Addr, error) {
	if len(data) < 16 {
		return 0, netip.Addr{}, ErrIncomplete
	}
	verCmd, fam := data[12], data[13]
	n := 16 + int(binary.BigEndian.Uint16(data[14:16]))
	if verCmd>>4 != 2 {
		return 0, netip.Addr{}, ErrInvalid
	}
	if len(data) < n {
		return 0, netip.Addr{}, ErrIncomplete
	}
	body := data[16:n]
	switch verCmd & 0xF {
	case 0: // LOCAL
		return n, netip.Addr{}, nil
	case 1: // PROXY
	default:
		return 0, netip.Addr{}, ErrInvalid
	}
	switch fam >> 4 {
	case 1: // AF_INET
		if len(body) < 12 {
			return 0, netip.Addr{}, ErrInvalid
		}
		return n, netip.AddrFrom4([4]byte(body[:4])), nil
	case 2: // AF_INET6
		if len(body) < 36 {
			return 0, netip.Addr{}, ErrInvalid
		}
		return n, netip.AddrFrom16([16]byte(body[:16])).Unmap(), nil
	default: // AF_UNSPEC, AF_UNIX: no address to use
		return n, netip.Addr{}, nil
	}
}
