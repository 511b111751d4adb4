package bench

import (
	"fmt"
	"net/netip"
	"strings"
	"sync/atomic"
)

// maxSourceIPs bounds --source-ips: 1000 addresses carry 28 million
// connections at the Linux default of 28 232 ephemeral ports each.
const maxSourceIPs = 1 << 16

// ParseSourceIPs reads --source-ips: a comma list of addresses, ranges
// FIRST-LAST (same family, FIRST <= LAST) and CIDR prefixes (every address
// of the prefix). 127.0.0.2-127.0.0.40 gives 39 addresses. Every address of
// 127.0.0.0/8 works on Linux loopback without configuration.
func ParseSourceIPs(s string) ([]netip.Addr, error) {
	var out []netip.Addr
	add := func(a netip.Addr) error {
		if len(out) >= maxSourceIPs {
			return fmt.Errorf("more than %d addresses", maxSourceIPs)
		}
		out = append(out, a)
		return nil
	}
	for item := range strings.SplitSeq(s, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		switch {
		case strings.Contains(item, "/"):
			p, err := netip.ParsePrefix(item)
			if err != nil {
				return nil, fmt.Errorf("%q is not a CIDR prefix", item)
			}
			p = p.Masked()
			for a := p.Addr(); p.Contains(a); a = a.Next() {
				if err := add(a); err != nil {
					return nil, err
				}
				if !a.Next().IsValid() {
					break
				}
			}
		case strings.Contains(item, "-"):
			first, last, _ := strings.Cut(item, "-")
			a, err1 := netip.ParseAddr(strings.TrimSpace(first))
			b, err2 := netip.ParseAddr(strings.TrimSpace(last))
			if err1 != nil || err2 != nil {
				return nil, fmt.Errorf("%q is not a range FIRST-LAST of IP addresses", item)
			}
			a, b = a.Unmap(), b.Unmap()
			if a.Is4() != b.Is4() {
				return nil, fmt.Errorf("range %q mixes IPv4 and IPv6", item)
			}
			if b.Less(a) {
				return nil, fmt.Errorf("range %q ends before it starts", item)
			}
			for x := a; ; x = x.Next() {
				if err := add(x); err != nil {
					return nil, err
				}
				if x == b {
					break
				}
			}
		default:
			a, err := netip.ParseAddr(item)
			if err != nil {
				return nil, fmt.Errorf("%q is not an IP address", item)
			}
			if err := add(a.Unmap()); err != nil {
				return nil, err
			}
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no address in %q", s)
	}
	return out, nil
}

// sourcePicker hands out source addresses round-robin; empty = none.
type sourcePicker struct {
	addrs []string
	next  atomic.Uint64
}

func newSourcePicker(ips []netip.Addr) *sourcePicker {
	p := &sourcePicker{addrs: make([]string, len(ips))}
	for i, a := range ips {
		p.addrs[i] = a.String()
	}
	return p
}

// pick returns the next source address, or "" when none is configured.
func (p *sourcePicker) pick() string {
	if len(p.addrs) == 0 {
		return ""
	}
	return p.addrs[(p.next.Add(1)-1)%uint64(len(p.addrs))]
}
