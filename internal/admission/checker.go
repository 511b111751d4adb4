package admission

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/netip"
	"strings"
	"time"

	"github.com/wsgate/wsgate/internal/auth"
	"github.com/wsgate/wsgate/internal/config"
	"github.com/wsgate/wsgate/protocol"
)

// Checker judges the handshakes of one node (contract section 3): the
// client's address behind trusted proxies, the Origin, the handshake rate
// and connections per IP, the token (HS256 secrets, a public key, a JWKS
// key set) or the connect proxy. It holds no connection: what it admits
// is a Params that the node turns into one.
type Checker struct {
	opts            Options
	log             *slog.Logger
	allowQueryToken bool
	insecure        bool
	connectURL      string
	secret          string // WSGATE_UPSTREAM_SECRET: signs connect proxy requests
	verifier        *auth.Verifier
	keys            *auth.KeySet // WSGATE_JWKS_URL; nil when unset
	origins         *auth.OriginPolicy
	hsLimiter       *auth.RateLimiter
	ipConns         *auth.ConnCounter
	trusted         []netip.Prefix // WSGATE_TRUSTED_PROXIES
}

// Options are what a Checker asks of the node that owns it.
type Options struct {
	Log *slog.Logger
	// NotAccepting says why the node takes no handshake now ("" when it
	// does): draining, backend unreachable.
	NotAccepting func() string
	// OnKeyFetch counts the key set's fetches by result.
	OnKeyFetch func(result string)
	// KeySetMinInterval is the least time between two fetches of the
	// key set (0: the key set's default).
	KeySetMinInterval time.Duration
}

// New builds the checks of cfg. The key set of WSGATE_JWKS_URL, when set,
// is fetched by the caller (Keys: Refresh, then Run).
func New(cfg *config.Gateway, o Options) (*Checker, error) {
	if o.Log == nil {
		o.Log = slog.Default()
	}
	if o.NotAccepting == nil {
		o.NotAccepting = func() string { return "" }
	}
	g := &Checker{
		opts: o, log: o.Log,
		allowQueryToken: cfg.AllowQueryToken, insecure: cfg.AuthInsecure,
		connectURL: cfg.ConnectURL, secret: cfg.UpstreamSecret,
		origins:   auth.NewOriginPolicy(cfg.AllowedOrigins),
		hsLimiter: auth.NewRateLimiter(cfg.HandshakeRatePerIP),
		ipConns:   auth.NewConnCounter(cfg.MaxConnsPerIP),
	}
	trusted, err := config.ParsePrefixes(cfg.TrustedProxies)
	if err != nil {
		return nil, fmt.Errorf("WSGATE_TRUSTED_PROXIES: %w", err)
	}
	g.trusted = trusted
	vc, err := VerifierConfig(cfg)
	if err != nil {
		return nil, err
	}
	if cfg.JWKSURL != "" {
		ks, err := auth.NewKeySet(auth.KeySetConfig{
			URL: cfg.JWKSURL, Logger: o.Log, MinInterval: o.KeySetMinInterval, OnFetch: o.OnKeyFetch,
		})
		if err != nil {
			return nil, fmt.Errorf("WSGATE_JWKS_URL: %w", err)
		}
		g.keys = ks
	}
	if len(vc.HMACSecrets) > 0 || vc.PublicKeyPEM != nil || g.keys != nil {
		vc.KeySet = g.keys
		v, err := auth.NewVerifier(vc)
		if err != nil {
			return nil, err
		}
		g.verifier = v
	}
	return g, nil
}

// Verifier is the token verifier (nil when no key is configured); room
// tokens are checked with it too.
func (g *Checker) Verifier() *auth.Verifier { return g.verifier }

// Keys is the key set of WSGATE_JWKS_URL (nil when unset).
func (g *Checker) Keys() *auth.KeySet { return g.keys }

// Origins is the Origin policy (WSGATE_ALLOWED_ORIGINS), also the CORS of
// the node's HTTP surface.
func (g *Checker) Origins() *auth.OriginPolicy { return g.origins }

// IPConns counts the connections held per client IP.
func (g *Checker) IPConns() *auth.ConnCounter { return g.ipConns }

// TrustedPeer reports whether a peer address is one of
// WSGATE_TRUSTED_PROXIES.
func (g *Checker) TrustedPeer(ip string) bool {
	if len(g.trusted) == 0 {
		return false
	}
	a, err := netip.ParseAddr(ip)
	return err == nil && g.trustedAddr(a.Unmap())
}

func (g *Checker) trustedAddr(a netip.Addr) bool {
	for _, p := range g.trusted {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// ClientIP is the address the per-IP limits and logs use: the peer's, or
// for a trusted proxy the rightmost X-Forwarded-For entry that is not one
// of our proxies; X-Real-IP only when there is no X-Forwarded-For. An
// entry that does not parse ends the walk at the last hop we trust: what
// lies left of it is the client's to forge.
func (g *Checker) ClientIP(req *Request) string {
	if !g.TrustedPeer(req.IP) {
		return req.IP
	}
	if req.XFF != "" {
		parts := strings.Split(req.XFF, ",")
		for i := len(parts) - 1; i >= 0; i-- {
			a, err := netip.ParseAddr(strings.TrimSpace(parts[i]))
			if err != nil {
				break
			}
			if a = a.Unmap(); !g.trustedAddr(a) {
				return a.String()
			}
		}
		return req.IP
	}
	if a, err := netip.ParseAddr(strings.TrimSpace(req.RealIP)); err == nil {
		return a.Unmap().String()
	}
	return req.IP
}

// Token reads the client token: Authorization header, then a
// bearer.<jwt> subprotocol entry, then the token query parameter (when
// WSGATE_ALLOW_QUERY_TOKEN allows it).
func (g *Checker) Token(req *Request) string {
	if a := req.Authz; len(a) > 7 && strings.EqualFold(a[:7], "bearer ") {
		return strings.TrimSpace(a[7:])
	}
	for _, v := range req.Protocols {
		for _, p := range strings.Split(v, ",") {
			if p = strings.TrimSpace(p); strings.HasPrefix(p, "bearer.") {
				return p[len("bearer."):]
			}
		}
	}
	if g.allowQueryToken {
		return req.Query.Get("token")
	}
	return ""
}

// Peer runs the first checks of every handshake, in the contract's
// order: the node accepts connections, the Origin, the handshake rate.
func (g *Checker) Peer(req *Request) (Params, *Refusal) {
	req.IP = g.ClientIP(req)
	a := Params{IP: req.IP}
	if why := g.opts.NotAccepting(); why != "" {
		f := Refuse(http.StatusServiceUnavailable, "unavailable", "node not accepting connections ("+why+")")
		f.RetryAfter = 5 * time.Second
		return a, f
	}
	if !g.origins.AllowOrigin(req.Origin, req.Host) {
		return a, Refuse(http.StatusForbidden, "origin_forbidden", "Origin "+req.Origin+" is not allowed")
	}
	if ok, after := g.hsLimiter.Allow(req.IP, time.Now()); !ok {
		f := Refuse(http.StatusTooManyRequests, "rate_limited", "too many handshakes from "+req.IP)
		f.RetryAfter = after
		return a, f
	}
	return a, nil
}

// Credentials is the rest of a handshake's checks: the token (or the
// connect proxy's request, made later by AskProxy), then the per-IP slot.
// Without wait it never blocks: a token naming a kid the key set lacks,
// when a refresh of the set is due, gets a refusal with AwaitKeys, and the
// caller runs Credentials again with wait on a goroutine of its own.
func (g *Checker) Credentials(ctx context.Context, req *Request, a Params, wait bool) (Params, *Refusal) {
	var err error
	if g.UsesProxy(req) {
		// Asked off the event loop, once the IP slot is held (AskProxy).
		a.Proxy = connectRequest(req)
	} else if a.Claims, err = g.authenticate(ctx, req, wait); err != nil {
		f := AuthRefusal(err)
		if !wait && errors.Is(err, auth.ErrTokenKid) && g.keys.RefreshDue() {
			f.AwaitKeys = true
		}
		return a, f
	}
	return a, g.AcquireIP(req.IP)
}

// AcquireIP takes one slot of the per-IP connection limit (see admission).
func (g *Checker) AcquireIP(ip string) *Refusal {
	if !g.ipConns.Acquire(ip) {
		f := Refuse(http.StatusTooManyRequests, "rate_limited", "too many connections from "+ip)
		f.Reason, f.RetryAfter = "conn_limit", 5*time.Second
		return f
	}
	return nil
}

// Release gives back the per-IP slot of an admission that did not become
// a connection.
func (g *Checker) Release(a *Params) { g.ipConns.Release(a.IP) }

// authenticate verifies the token (or, in insecure mode, takes ?user=).
// With wait, a token that names a kid the key set lacks waits for one
// refresh of the set (see verify).
func (g *Checker) authenticate(ctx context.Context, req *Request, wait bool) (*auth.Claims, error) {
	tok := g.Token(req)
	if tok == "" && g.insecure {
		user := req.Query.Get("user")
		if user == "" {
			return nil, errUnauthorized("insecure mode: the user query parameter is required")
		}
		if err := protocol.ValidName("user", user); err != nil {
			return nil, errBadName(err.Error())
		}
		return &auth.Claims{Subject: user, Rooms: []string{"*"}, Pub: []string{"user:*", "room:*"}}, nil
	}
	if tok == "" {
		return nil, errUnauthorized("token missing: send Authorization: Bearer <jwt>, a bearer.<jwt> subprotocol or ?token=")
	}
	return g.Verify(ctx, tok, wait)
}

// Verify checks a client token. With wait, a token naming a kid that the
// key set lacks waits for one refresh of the set (at most one fetch every
// 30 s, shared by every waiter) and is checked again: a key added to the
// set is accepted without a restart. Without wait it never blocks.
func (g *Checker) Verify(ctx context.Context, tok string, wait bool) (*auth.Claims, error) {
	if g.verifier == nil {
		return nil, errUnauthorized("token verification is not configured on this node")
	}
	claims, err := g.verifier.Verify(tok, time.Time{})
	if err != nil && wait && errors.Is(err, auth.ErrTokenKid) && g.keys.Refresh(ctx) {
		claims, err = g.verifier.Verify(tok, time.Time{})
	}
	return claims, err
}
