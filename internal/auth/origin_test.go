package auth

import (
	"net/http/httptest"
	"testing"
)

func TestOriginPolicy(t *testing.T) {
	sameHost := NewOriginPolicy(nil)
	listed := NewOriginPolicy([]string{" https://App.Example.com/ ", "http://localhost:3000", ""})
	anyOrigin := NewOriginPolicy([]string{"https://a.example", "*"})
	blank := NewOriginPolicy([]string{"", " "})

	tests := []struct {
		name   string
		p      *OriginPolicy
		origin string // "" = no header
		host   string
		want   bool
	}{
		{"no origin, same-host", sameHost, "", "gw.example:8080", true},
		{"no origin, listed", listed, "", "gw.example", true},
		{"star", anyOrigin, "https://evil.example", "gw.example", true},
		{"star allows null", anyOrigin, "null", "gw.example", true},
		{"blank list is same-host", blank, "https://evil.example", "gw.example", false},
		{"blank list same host", blank, "https://gw.example", "gw.example", true},

		{"same host and port", sameHost, "http://gw.example:8080", "gw.example:8080", true},
		{"same host case", sameHost, "HTTP://GW.Example:8080", "gw.example:8080", true},
		{"https default port, host without port", sameHost, "https://gw.example", "gw.example", true},
		{"https default port, host with 443", sameHost, "https://gw.example", "gw.example:443", true},
		{"http default port, host with 80", sameHost, "http://gw.example", "gw.example:80", true},
		{"origin explicit 443, host bare", sameHost, "https://gw.example:443", "gw.example", true},
		{"wss default port", sameHost, "wss://gw.example", "gw.example:443", true},
		{"ws default port", sameHost, "ws://gw.example", "gw.example:80", true},
		{"http origin, host 443", sameHost, "http://gw.example", "gw.example:443", false},
		{"https origin, host 80", sameHost, "https://gw.example", "gw.example:80", false},
		{"different port", sameHost, "http://gw.example:8081", "gw.example:8080", false},
		{"origin default, host other port", sameHost, "http://gw.example", "gw.example:8080", false},
		{"different host", sameHost, "http://evil.example:8080", "gw.example:8080", false},
		{"suffix host", sameHost, "http://evilgw.example", "gw.example", false},
		{"subdomain", sameHost, "http://a.gw.example", "gw.example", false},
		{"trailing dot", sameHost, "https://gw.example.", "gw.example", true},
		{"trailing slash", sameHost, "https://gw.example/", "gw.example", true},
		{"ipv6", sameHost, "http://[::1]:8080", "[::1]:8080", true},
		{"ipv6 default port", sameHost, "https://[::1]", "[::1]", true},
		{"ipv6 other port", sameHost, "http://[::1]:8081", "[::1]:8080", false},
		{"ipv4", sameHost, "http://127.0.0.1:8080", "127.0.0.1:8080", true},
		{"null origin", sameHost, "null", "gw.example", false},
		{"file scheme", sameHost, "file://gw.example", "gw.example", false},
		{"extension scheme", sameHost, "chrome-extension://gw.example", "gw.example", false},
		{"path in origin", sameHost, "http://gw.example/x", "gw.example", false},
		{"userinfo", sameHost, "http://evil@gw.example", "gw.example", false},
		{"empty host", sameHost, "http://", "gw.example", false},
		{"empty host port", sameHost, "http://:80", ":80", false},
		{"empty request host", sameHost, "http://gw.example", "", false},
		{"bad port", sameHost, "http://gw.example:http", "gw.example:http", false},
		{"port out of range", sameHost, "http://gw.example:70000", "gw.example:70000", false},
		{"empty port", sameHost, "http://gw.example:", "gw.example:", false},
		{"bare ipv6", sameHost, "http://::1", "::1", false},
		{"unclosed bracket", sameHost, "http://[::1", "[::1", false},
		{"junk after bracket", sameHost, "http://[::1]x", "[::1]x", false},
		{"no scheme", sameHost, "gw.example", "gw.example", false},

		{"listed exact", listed, "https://app.example.com", "gw.example", true},
		{"listed case", listed, "HTTPS://APP.EXAMPLE.COM", "gw.example", true},
		{"listed trailing slash", listed, "https://app.example.com/", "gw.example", true},
		{"listed with port", listed, "http://localhost:3000", "gw.example", true},
		{"listed other port", listed, "http://localhost:3001", "gw.example", false},
		{"listed other scheme", listed, "http://app.example.com", "gw.example", false},
		{"listed prefix", listed, "https://app.example.com.evil", "gw.example", false},
		{"list excludes same host", listed, "https://gw.example", "gw.example", false},
		{"listed null", listed, "null", "gw.example", false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := httptest.NewRequest("GET", "/ws", nil)
			r.Host = tc.host
			if tc.origin != "" {
				r.Header.Set("Origin", tc.origin)
			}
			if got := tc.p.Allow(r); got != tc.want {
				t.Fatalf("Allow(origin %q, host %q) = %v, want %v", tc.origin, tc.host, got, tc.want)
			}
		})
	}
}
