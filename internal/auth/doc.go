// Package auth decides who may open a WebSocket on a gateway node and what
// they may do once connected, before anything is registered for them.
//
// It holds four small, independent pieces, each in its own file:
//
//   - verifier.go: client JWT verification ([Verifier]). The user id is the
//     token's sub claim; exp is required; nbf, iss and aud are checked by
//     golang-jwt's validators, with a leeway; exp beyond a maximum lifetime,
//     dates given as strings and crit headers are refused; only the
//     algorithms the configured keys allow are accepted (HS256 with any of
//     several secrets, RS256 with an RSA key, ES256 with an ECDSA P-256 key,
//     and RS256/ES256/EdDSA keys of a key set by kid), so "none" and
//     algorithm switching are refused. Every refusal is an [*Error] whose
//     message is short and safe to send to the client.
//   - keyset.go: a JWKS endpoint's keys ([KeySet]), fetched at start, every
//     5 minutes and on an unknown kid (at most every 30 s), the last good
//     set kept while the endpoint is down.
//   - patterns.go: the rooms and pub claims ([Match], [AllowRoom],
//     [AllowPublish]); a pattern is exact or ends with a "*" wildcard.
//   - origin.go: the Origin check of the handshake ([OriginPolicy]).
//   - limits.go: handshakes per second per IP ([RateLimiter]), concurrent
//     connections per key ([ConnCounter]) and the per-connection frame rate
//     ([Bucket]).
//
// Time is always passed in by the caller (now), so every decision is
// reproducible in tests without sleeping.
package auth
