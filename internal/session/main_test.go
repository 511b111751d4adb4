package session

import (
	"testing"

	"go.uber.org/goleak"
)

// The session starts no goroutines (its driver runs the catch-ups); a test that leaks one fails here.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
