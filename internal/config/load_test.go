package config

import (
	"bytes"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestNames(t *testing.T) {
	tests := []struct{ name, env, flag, key string }{
		{"redis-url", "WSGATE_REDIS_URL", "--redis-url", "redis_url"},
		{"listen", "WSGATE_LISTEN", "--listen", "listen"},
		{"max-conns-per-node", "WSGATE_MAX_CONNS_PER_NODE", "--max-conns-per-node", "max_conns_per_node"},
	}
	for _, tt := range tests {
		if got := EnvName(tt.name); got != tt.env {
			t.Errorf("EnvName(%q) = %q, want %q", tt.name, got, tt.env)
		}
		if got := FlagName(tt.name); got != tt.flag {
			t.Errorf("FlagName(%q) = %q, want %q", tt.name, got, tt.flag)
		}
		if got := FileKey(tt.name); got != tt.key {
			t.Errorf("FileKey(%q) = %q, want %q", tt.name, got, tt.key)
		}
	}
}

// testConfig has one setting of each type.
type testConfig struct {
	Str  string
	Dur  time.Duration
	Flag bool
	List []string
	Num  int
	Rate float64
}

func newTestSet(c *testConfig) *Set {
	s := NewSet("test")
	s.String(&c.Str, "redis-url", "default-url", "a string")
	s.Duration(&c.Dur, "ping-interval", 25*time.Second, "a duration")
	s.Bool(&c.Flag, "auth-insecure", false, "a bool")
	s.List(&c.List, "allowed-origins", []string{"d"}, "a list")
	s.Int(&c.Num, "send-queue", 256, "an int")
	s.Float(&c.Rate, "drain-rate", 500, "a float")
	return s
}

func TestPrecedence(t *testing.T) {
	file := "redis_url: file-url\nping_interval: 30s\nauth_insecure: yes\nallowed_origins: [f1, f2]\n"
	env := map[string]string{
		"WSGATE_REDIS_URL":       "env-url",
		"WSGATE_PING_INTERVAL":   "40s",
		"WSGATE_AUTH_INSECURE":   "0",
		"WSGATE_ALLOWED_ORIGINS": "e1, e2",
	}
	flags := []string{"--redis-url", "flag-url", "--ping-interval=50s", "--auth-insecure", "--allowed-origins", "x1,x2"}
	tests := []struct {
		name     string
		file     bool
		env      bool
		flags    bool
		wantStr  string
		wantDur  time.Duration
		wantBool bool
		wantList []string
		wantSrc  Source
	}{
		{"default", false, false, false, "default-url", 25 * time.Second, false, []string{"d"}, FromDefault},
		{"file over default", true, false, false, "file-url", 30 * time.Second, true, []string{"f1", "f2"}, FromFile},
		{"env over file", true, true, false, "env-url", 40 * time.Second, false, []string{"e1", "e2"}, FromEnv},
		{"env over default", false, true, false, "env-url", 40 * time.Second, false, []string{"e1", "e2"}, FromEnv},
		{"flag over env and file", true, true, true, "flag-url", 50 * time.Second, true, []string{"x1", "x2"}, FromFlag},
		{"flag over file", true, false, true, "flag-url", 50 * time.Second, true, []string{"x1", "x2"}, FromFlag},
		{"flag over default", false, false, true, "flag-url", 50 * time.Second, true, []string{"x1", "x2"}, FromFlag},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var c testConfig
			s := newTestSet(&c)
			var args []string
			e := map[string]string{}
			if tt.file {
				args = append(args, "--config", writeFile(t, "c.yaml", file))
			}
			if tt.env {
				e = env
			}
			if tt.flags {
				args = append(args, flags...)
			}
			if err := s.Load(args, envOf(e)); err != nil {
				t.Fatal(err)
			}
			if c.Str != tt.wantStr || c.Dur != tt.wantDur || c.Flag != tt.wantBool || !slices.Equal(c.List, tt.wantList) {
				t.Fatalf("got %q %v %v %q, want %q %v %v %q", c.Str, c.Dur, c.Flag, c.List,
					tt.wantStr, tt.wantDur, tt.wantBool, tt.wantList)
			}
			for _, name := range []string{"redis-url", "ping-interval", "auth-insecure", "allowed-origins"} {
				if got := s.Lookup(name).Source(); got != tt.wantSrc {
					t.Errorf("%s source = %v, want %v", name, got, tt.wantSrc)
				}
			}
			// Untouched settings keep their defaults.
			if c.Num != 256 || c.Rate != 500 || s.Lookup("send-queue").Source() != FromDefault {
				t.Errorf("untouched settings changed: %d %g", c.Num, c.Rate)
			}
		})
	}
}

func TestConfigFromEnv(t *testing.T) {
	var c testConfig
	s := newTestSet(&c)
	p := writeFile(t, "c.yaml", "redis_url: from-file\n")
	if err := s.Load(nil, envOf(map[string]string{ConfigEnv: p})); err != nil {
		t.Fatal(err)
	}
	if c.Str != "from-file" || s.ConfigFile() != p {
		t.Fatalf("WSGATE_CONFIG not read: %q %q", c.Str, s.ConfigFile())
	}
	// --config wins over WSGATE_CONFIG.
	q := writeFile(t, "d.yaml", "redis_url: from-flag-file\n")
	if err := s.Load([]string{"--config=" + q}, envOf(map[string]string{ConfigEnv: p})); err != nil {
		t.Fatal(err)
	}
	if c.Str != "from-flag-file" {
		t.Fatalf("--config did not win: %q", c.Str)
	}
}

func TestLoadResetsToDefaults(t *testing.T) {
	var c testConfig
	s := newTestSet(&c)
	if err := s.Load([]string{"--redis-url=x", "--allowed-origins=a"}, nil); err != nil {
		t.Fatal(err)
	}
	if err := s.Load(nil, nil); err != nil {
		t.Fatal(err)
	}
	if c.Str != "default-url" || !slices.Equal(c.List, []string{"d"}) {
		t.Fatalf("second Load kept old values: %q %q", c.Str, c.List)
	}
}

func TestParse(t *testing.T) {
	tests := []struct {
		name  string
		args  []string
		env   map[string]string
		check func(c testConfig) bool
		err   string
	}{
		{name: "bool yes", env: map[string]string{"WSGATE_AUTH_INSECURE": "yes"}, check: func(c testConfig) bool { return c.Flag }},
		{name: "bool 1", env: map[string]string{"WSGATE_AUTH_INSECURE": "1"}, check: func(c testConfig) bool { return c.Flag }},
		{name: "bool TRUE", env: map[string]string{"WSGATE_AUTH_INSECURE": "TRUE"}, check: func(c testConfig) bool { return c.Flag }},
		{name: "bool flag no", args: []string{"--auth-insecure=no"}, env: map[string]string{"WSGATE_AUTH_INSECURE": "true"},
			check: func(c testConfig) bool { return !c.Flag }},
		{name: "bool bad", env: map[string]string{"WSGATE_AUTH_INSECURE": "maybe"},
			err: `invalid setting WSGATE_AUTH_INSECURE="maybe" (from env): want true, false, 1, 0, yes or no`},
		{name: "duration bad env", env: map[string]string{"WSGATE_PING_INTERVAL": "abc"},
			err: `invalid setting WSGATE_PING_INTERVAL="abc" (from env): time: invalid duration "abc"`},
		{name: "duration bad flag", args: []string{"--ping-interval", "5"},
			err: `invalid setting --ping-interval="5" (from flag): time: missing unit in duration "5"`},
		{name: "int bad", env: map[string]string{"WSGATE_SEND_QUEUE": "12x"},
			err: `invalid setting WSGATE_SEND_QUEUE="12x" (from env): not an integer`},
		{name: "int range", args: []string{"--send-queue=99999999999999999999"},
			err: `invalid setting --send-queue="99999999999999999999" (from flag): integer out of range`},
		{name: "float bad", env: map[string]string{"WSGATE_DRAIN_RATE": "fast"},
			err: `invalid setting WSGATE_DRAIN_RATE="fast" (from env): not a finite number`},
		{name: "float NaN", env: map[string]string{"WSGATE_DRAIN_RATE": "NaN"}, err: `not a finite number`},
		{name: "float ok", env: map[string]string{"WSGATE_DRAIN_RATE": " 2.5 "}, check: func(c testConfig) bool { return c.Rate == 2.5 }},
		{name: "empty env keeps typed value", env: map[string]string{"WSGATE_PING_INTERVAL": "", "WSGATE_SEND_QUEUE": " "},
			check: func(c testConfig) bool { return c.Dur == 25*time.Second && c.Num == 256 }},
		{name: "empty env empties string and list", env: map[string]string{"WSGATE_REDIS_URL": "", "WSGATE_ALLOWED_ORIGINS": ""},
			check: func(c testConfig) bool { return c.Str == "" && len(c.List) == 0 && c.List != nil }},
		{name: "empty duration flag", args: []string{"--ping-interval="}, err: `invalid setting --ping-interval="" (from flag)`},
		{name: "list trims and drops empties", env: map[string]string{"WSGATE_ALLOWED_ORIGINS": " a ,,b, "},
			check: func(c testConfig) bool { return slices.Equal(c.List, []string{"a", "b"}) }},
		{name: "list flag repeated adds", args: []string{"--allowed-origins=a", "--allowed-origins", "b,c"},
			check: func(c testConfig) bool { return slices.Equal(c.List, []string{"a", "b", "c"}) }},
		{name: "scalar flag repeated keeps last", args: []string{"--send-queue=1", "--send-queue=2"},
			check: func(c testConfig) bool { return c.Num == 2 }},
		{name: "single dash flag", args: []string{"-send-queue=3"}, check: func(c testConfig) bool { return c.Num == 3 }},
		{name: "unknown flag", args: []string{"--nope"}, err: "flag provided but not defined: -nope|wsgate test --help"},
		{name: "missing flag value", args: []string{"--redis-url"}, err: "flag needs an argument: -redis-url"},
		{name: "positional", args: []string{"extra"}, err: `unexpected argument "extra"`},
		{name: "missing config file", args: []string{"--config", "/nonexistent/wsgate.yaml"},
			err: "cannot read config file /nonexistent/wsgate.yaml: no such file or directory"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var c testConfig
			s := newTestSet(&c)
			err := s.Load(tt.args, envOf(tt.env))
			wantErr(t, err, tt.err)
			if tt.check != nil && !tt.check(c) {
				t.Fatalf("unexpected result %+v", c)
			}
		})
	}
}

func TestSettingErrorType(t *testing.T) {
	var c testConfig
	s := newTestSet(&c)
	err := s.Load(nil, envOf(map[string]string{"WSGATE_PING_INTERVAL": "abc"}))
	var se *SettingError
	if !errors.As(err, &se) || se.Setting != "ping-interval" || se.Source != FromEnv || se.Value != "abc" {
		t.Fatalf("got %#v", err)
	}
}

func TestPositionalArgs(t *testing.T) {
	var c testConfig
	s := newTestSet(&c)
	s.ArgsUsage = "<scenario>"
	if err := s.Load([]string{"--send-queue=5", "connect", "more"}, nil); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(s.Args(), []string{"connect", "more"}) || c.Num != 5 {
		t.Fatalf("args %q, num %d", s.Args(), c.Num)
	}
}

func TestHiddenSetting(t *testing.T) {
	var c Gateway
	s := NewDevSet(&c)
	var out bytes.Buffer
	s.SetOutput(&out)
	if err := s.Load([]string{"--help"}, nil); !errors.Is(err, ErrHelp) {
		t.Fatalf("got %v, want ErrHelp", err)
	}
	if strings.Contains(out.String(), "WSGATE_DEV,") || strings.Contains(out.String(), "--dev[") {
		t.Fatal("--help shows the hidden dev setting")
	}
	wantErr(t, s.Load([]string{"--dev=false"}, nil), "flag provided but not defined: -dev")
	if err := s.Load(nil, envOf(map[string]string{"WSGATE_DEV": "false"})); err != nil || !c.Dev {
		t.Fatalf("env changed hidden setting: %v %v", err, c.Dev)
	}
	p := writeFile(t, "c.yaml", "dev: false\n")
	wantErr(t, s.Load([]string{"--config", p}, nil), `unknown key "dev"`)
	if !c.Dev || !c.AuthInsecure {
		t.Fatalf("dev defaults lost: Dev=%v AuthInsecure=%v", c.Dev, c.AuthInsecure)
	}
}

func TestSetDefault(t *testing.T) {
	var c testConfig
	s := newTestSet(&c)
	if err := s.SetDefault("send-queue", "7"); err != nil || c.Num != 7 || s.Lookup("send-queue").Default() != "7" {
		t.Fatalf("SetDefault: %v %d", err, c.Num)
	}
	wantErr(t, s.SetDefault("send-queue", "x"), "default of send-queue: not an integer")
	wantErr(t, s.SetDefault("nope", "1"), `no setting "nope"`)
}

func TestRegisterPanics(t *testing.T) {
	for _, name := range []string{"Bad", "a_b", "-a", "a--b", "config", "help", "dup"} {
		t.Run(name, func(t *testing.T) {
			s := NewSet("x")
			var v string
			s.String(&v, "dup", "", "")
			defer func() {
				if recover() == nil {
					t.Fatalf("registering %q did not panic", name)
				}
			}()
			s.String(&v, name, "", "")
		})
	}
}

func TestValueRedaction(t *testing.T) {
	var c Gateway
	s := NewGatewaySet(&c)
	env := map[string]string{
		"WSGATE_API_KEY":   "k3y",
		"WSGATE_REDIS_URL": "redis://user:pa55@redis:6379/0",
	}
	if err := s.Load(nil, envOf(env)); err != nil {
		t.Fatal(err)
	}
	if v := s.Lookup("api-key").Value(); v != "***" {
		t.Errorf("api-key shown as %q", v)
	}
	if v := s.Lookup("jwt-secret").Value(); v != "" {
		t.Errorf("empty jwt-secret shown as %q", v)
	}
	if v := s.Lookup("redis-url").Value(); strings.Contains(v, "pa55") || !strings.Contains(v, "redis:6379") {
		t.Errorf("redis-url shown as %q", v)
	}
	if v := s.Lookup("ping-interval").Value(); v != "25s" {
		t.Errorf("ping-interval shown as %q", v)
	}
	if v := redactURL("redis-sentinel://:se,cret@h1:1,h2:2/m"); strings.Contains(v, "se,cret") {
		t.Errorf("sentinel URL shown as %q", v)
	}
}

func TestFormatDuration(t *testing.T) {
	tests := map[time.Duration]string{
		0: "0s", 25 * time.Second: "25s", 60 * time.Second: "60s", 90 * time.Second: "90s",
		2 * time.Minute: "2m", 24 * time.Hour: "24h", 100 * time.Second: "1m40s",
		500 * time.Millisecond: "500ms", -time.Second: "-1s", 36 * time.Hour: "36h",
	}
	for d, want := range tests {
		if got := formatDuration(d); got != want {
			t.Errorf("formatDuration(%v) = %q, want %q", d, got, want)
		}
	}
}
