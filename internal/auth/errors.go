package auth

// Error is the error Verify returns. Its message is short, names the
// problem and never contains key material or token contents, so a gateway
// can send it as is in its 401 answer. Reason is a stable snake_case word
// suitable as a metric label.
//
// Compare with errors.Is against the Err* values below; an error naming a
// particular claim (for example "token claim rooms invalid") matches
// [ErrTokenClaims].
type Error struct {
	reason string
	msg    string
}

// Error returns the client-safe message.
func (e *Error) Error() string { return e.msg }

// Reason returns a stable snake_case word for logs and metric labels.
func (e *Error) Reason() string { return e.reason }

// Is reports whether target is an *Error of the same reason.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.reason == e.reason
}

// The refusals of Verify. Each is the answer to one question a client or an
// operator would ask ("why was I refused?").
var (
	ErrTokenMissing     = &Error{"token_missing", "token missing"}
	ErrTokenTooLarge    = &Error{"token_too_large", "token too large"}
	ErrTokenMalformed   = &Error{"token_malformed", "token malformed"}
	ErrTokenAlgorithm   = &Error{"token_algorithm", "token algorithm not allowed"}
	ErrTokenSignature   = &Error{"token_signature", "token signature invalid"}
	ErrTokenClaims      = &Error{"token_claims", "token claims invalid"}
	ErrTokenNoExpiry    = &Error{"token_no_exp", "token exp missing"}
	ErrTokenExpired     = &Error{"token_expired", "token expired"}
	ErrTokenNotYetValid = &Error{"token_not_yet_valid", "token not valid yet"}
	ErrTokenIssuer      = &Error{"token_issuer", "token issuer mismatch"}
	ErrTokenAudience    = &Error{"token_audience", "token audience mismatch"}
	ErrTokenSubject     = &Error{"token_subject", "token sub missing or invalid"}
	ErrTokenSubjectName = &Error{"bad_subject", "token sub has a forbidden character"}
	ErrTokenCrit        = &Error{"token_crit", "token crit header not supported"}
	ErrTokenKid         = &Error{"token_kid", "token kid unknown"}
	ErrKeysUnavailable  = &Error{"keys_unavailable", "token key set not fetched yet"}
	ErrTokenLifetime    = &Error{"token_lifetime", "token exp beyond the maximum lifetime"}
)

// claimErrors name the claim whose JSON type is wrong. They are built once
// so a refusal does not allocate; each matches ErrTokenClaims.
var claimErrors = func() map[string]*Error {
	m := make(map[string]*Error)
	for _, c := range []string{"sub", "exp", "nbf", "iat", "iss", "aud", "jti", "rooms", "pub", "send"} {
		m[c] = &Error{ErrTokenClaims.reason, "token claim " + c + " invalid"}
	}
	return m
}()
