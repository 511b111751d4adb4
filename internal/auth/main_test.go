package auth

import (
	"testing"

	"go.uber.org/goleak"
)

// The package starts no goroutines; a test that leaks one fails here.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
