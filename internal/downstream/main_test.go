package downstream

import (
	"testing"

	"go.uber.org/goleak"
)

// Every source's goroutines end with its Run; a test that leaks one fails
// here.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// go-redis and franz-go keep pool and connection reapers until their
		// clients close; the tests close them in cleanups that run after
		// the leak check of a failing test only.
		goleak.IgnoreTopFunction("github.com/redis/go-redis/v9/internal/pool.(*ConnPool).reaper"),
	)
}
