package config

import (
	"slices"
	"strings"
	"testing"
)

func TestFile(t *testing.T) {
	tests := []struct {
		name    string
		content string
		err     string // "FILE" is replaced by the file's path
		check   func(c testConfig) bool
	}{
		{name: "all types", content: "# comment\nredis_url: redis://r:6379/1\nping_interval: 1m30s\nauth_insecure: true\n" +
			"allowed_origins: a, b\nsend_queue: 12\ndrain_rate: 0.5\n",
			check: func(c testConfig) bool {
				return c.Str == "redis://r:6379/1" && c.Dur == 90e9 && c.Flag && slices.Equal(c.List, []string{"a", "b"}) &&
					c.Num == 12 && c.Rate == 0.5
			}},
		{name: "list as sequence", content: "allowed_origins:\n  - https://a.example\n  - https://b.example\n",
			check: func(c testConfig) bool {
				return slices.Equal(c.List, []string{"https://a.example", "https://b.example"})
			}},
		{name: "empty file", content: "", check: func(c testConfig) bool { return c.Str == "default-url" }},
		{name: "only comments", content: "# nothing\n", check: func(c testConfig) bool { return c.Num == 256 }},
		{name: "null keeps typed, empties string", content: "send_queue:\nredis_url: ~\n",
			check: func(c testConfig) bool { return c.Num == 256 && c.Str == "" }},
		{name: "unknown key", content: "redis_url: x\nnope: 1\n", err: `config file FILE:2: unknown key "nope"`},
		{name: "dashed key hint", content: "redis-url: x\n", err: `config file FILE:1: unknown key "redis-url" (did you mean "redis_url"?)`},
		{name: "env name hint", content: "WSGATE_SEND_QUEUE: 1\n", err: `unknown key "WSGATE_SEND_QUEUE" (did you mean "send_queue"?)`},
		{name: "config key", content: "config: other.yaml\n", err: `config file FILE:1: unknown key "config"`},
		{name: "repeated key", content: "send_queue: 1\nsend_queue: 2\n", err: `key "send_queue" repeated`},
		{name: "bad int", content: "\nsend_queue: lots\n",
			err: `invalid setting send_queue="lots" (from file FILE:2): not an integer`},
		{name: "bad duration", content: "ping_interval: 25\n",
			err: `invalid setting ping_interval="25" (from file FILE:1): time: missing unit in duration "25"`},
		{name: "bad bool", content: "auth_insecure: sure\n",
			err: `invalid setting auth_insecure="sure" (from file FILE:1): want true, false, 1, 0, yes or no`},
		{name: "mapping for scalar", content: "send_queue:\n  size: 3\n",
			err: `invalid setting send_queue (from file FILE:2): want a single value, got a mapping`},
		{name: "sequence for scalar", content: "redis_url: [a, b]\n",
			err: `invalid setting redis_url (from file FILE:1): want a single value, got a sequence`},
		{name: "nested list item", content: "allowed_origins:\n  - [a]\n",
			err: `invalid setting allowed_origins (from file FILE:2): want a list of single values`},
		{name: "not a mapping", content: "- a\n- b\n", err: `config file FILE:1: want a mapping of settings (key: value), got a sequence`},
		{name: "syntax error", content: "redis_url: [a\n", err: `config file FILE: `},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := writeFile(t, "wsgate.yaml", tt.content)
			var c testConfig
			s := newTestSet(&c)
			err := s.Load([]string{"--config", p}, nil)
			wantErr(t, err, strings.ReplaceAll(tt.err, "FILE", p))
			if tt.check != nil && !tt.check(c) {
				t.Fatalf("unexpected result %+v", c)
			}
		})
	}
}
