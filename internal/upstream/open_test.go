package upstream

import (
	"strings"
	"testing"
)

func TestCheckURL(t *testing.T) {
	for _, tt := range []struct{ url, err string }{
		{"redis://127.0.0.1:6390/0?stream=s", ""},
		{"redis://127.0.0.1:6390/2", ""},
		{"rediss://u:p@h:6390/0", ""},
		{"nats://127.0.0.1:4333?subject=a.b&stream=S", ""},
		{"kafka://b1:9092,b2:9092/topic", ""},
		{"https://example.test/hook", ""},
		{"", "empty"},
		{"ftp://h/x", "unknown scheme"},
		{"http:///x", "no host"},
		{"redis://h:1/0?stream=", "empty stream"},
		{"nats://h:1?subjekt=x", "unknown nats option"},
		{"kafka://b1:9092", "one topic"},
		{"kafka://b1/t", "not host:port"},
		{"redis://u:hunter2@h:1/x", "redis url"},
	} {
		err := Check(tt.url)
		switch {
		case tt.err == "" && err != nil:
			t.Errorf("Check(%q) = %v, want nil", tt.url, err)
		case tt.err != "" && (err == nil || !strings.Contains(err.Error(), tt.err)):
			t.Errorf("Check(%q) = %v, want an error with %q", tt.url, err, tt.err)
		case err != nil && strings.Contains(err.Error(), "hunter2"):
			t.Errorf("Check(%q) error shows the password: %v", tt.url, err)
		}
	}
}
