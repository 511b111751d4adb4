// Package auth decides who may open a WebSocket on a gateway node and what
// they may do once connected, before anything is registered for them.
//
// It holds four small, independent pieces, each in its own file:
//
//   - verifier.go: client JWT verification ([Verifier]). The user id is the
//     token's sub claim; exp is required; nbf, iss and aud are checked;
//     only the algorithms the configured keys allow are accepted (HS256 with
//     a secret, RS256 with an RSA key, ES256 with an ECDSA P-256 key), so
//     "none" and algorithm switching are refused. Every refusal is an
//     [*Error] whose message is short and safe to send to the client.
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
