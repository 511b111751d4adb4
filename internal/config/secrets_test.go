package config

import (
	"strings"
	"testing"
)

const (
	longHMAC = "0123456789abcdef0123456789abcdef" // 32 bytes
	longKey  = "0123456789abcdef"                 // 16 bytes
)

// Contract §1 (v1.1): every secret has a _FILE form, read at start with
// its trailing newline trimmed.
func TestSecretFileForms(t *testing.T) {
	key := writeFile(t, "key", longKey+"\n")
	jwt := writeFile(t, "jwt", longHMAC+"\r\n")
	empty := writeFile(t, "empty", "\n")
	for _, tc := range []struct {
		env      map[string]string
		args     []string
		want     string
		key, jwt string
	}{
		{env: map[string]string{"WSGATE_API_KEY_FILE": key, "WSGATE_JWT_SECRET_FILE": jwt}, key: longKey, jwt: longHMAC},
		{args: []string{"--api-key-file", key}, env: map[string]string{"WSGATE_JWT_SECRET": "x"}, key: longKey, jwt: "x"},
		{env: map[string]string{"WSGATE_API_KEY_FILE": key, "WSGATE_API_KEY": "direct"}, want: "WSGATE_API_KEY and WSGATE_API_KEY_FILE are both set"},
		{env: map[string]string{"WSGATE_API_KEY_FILE": "/nonexistent/key"}, want: "WSGATE_API_KEY_FILE|/nonexistent/key"},
		{env: map[string]string{"WSGATE_JWT_SECRET_FILE": empty}, want: "WSGATE_JWT_SECRET_FILE|empty"},
	} {
		cfg := new(Gateway)
		err := NewGatewaySet(cfg).Load(tc.args, envOf(tc.env))
		wantErr(t, err, tc.want)
		if err == nil && (cfg.APIKey != tc.key || cfg.JWTSecret != tc.jwt) {
			t.Errorf("%v %v: api key %q, jwt secret %q; want %q, %q", tc.env, tc.args, cfg.APIKey, cfg.JWTSecret, tc.key, tc.jwt)
		}
	}
	pcfg := new(Gateway)
	wantErr(t, NewGatewaySet(pcfg).Load(nil, envOf(map[string]string{"WSGATE_PUSHER_SECRET_FILE": key})), "")
	if pcfg.PusherSecret != longKey {
		t.Errorf("WSGATE_PUSHER_SECRET_FILE: secret %q, want %q", pcfg.PusherSecret, longKey)
	}
	// Every secret of the gateway has one (WSGATE_UPSTREAM_SECRET too, once it is registered as a secret).
	set := NewGatewaySet(new(Gateway))
	for _, st := range set.Settings() {
		if st.redact == hideAll && set.Lookup(st.name+"-file") == nil {
			t.Errorf("%s has no _FILE form", st.Env())
		}
	}
}

// Every secret setting, present and future, refuses the placeholder.
func TestCheckPlaceholders(t *testing.T) {
	cfg := new(Gateway)
	set := NewGatewaySet(cfg)
	wantErr(t, set.Load(nil, envOf(map[string]string{"WSGATE_API_KEY": longKey})), "")
	wantErr(t, set.CheckPlaceholders(), "")
	var extra string
	set.String(&extra, "some-secret", "", "a secret registered later").Secret()
	wantErr(t, set.Load(nil, envOf(map[string]string{"WSGATE_SOME_SECRET": "CHANGE-ME-please"})), "")
	wantErr(t, set.CheckPlaceholders(), `WSGATE_SOME_SECRET starts with "CHANGE-ME"`)
}

// Contract §1 (v1.1): short HS256 secrets (each of a list), short API keys
// and CHANGE-ME placeholders are refused, naming the setting and never
// showing the value.
func TestCheckSecrets(t *testing.T) {
	for _, tc := range []struct {
		key, jwt, want string
	}{
		{longKey, longHMAC, ""},
		{"", "", ""},
		{longKey, longHMAC + "," + longHMAC + "x", ""},
		{longKey[:15], longHMAC, "WSGATE_API_KEY is 15 bytes long: at least 16"},
		{longKey, longHMAC[:31], "WSGATE_JWT_SECRET is 31 bytes long: at least 32"},
		{longKey, longHMAC + ",short", "WSGATE_JWT_SECRET is 5 bytes long"},
		{"CHANGE-ME-long-random-api-key", longHMAC, "WSGATE_API_KEY starts with \"CHANGE-ME\""},
		{longKey, "CHANGE-ME-long-random-jwt-secret", "WSGATE_JWT_SECRET starts with \"CHANGE-ME\""},
	} {
		c := &Gateway{APIKey: tc.key, JWTSecret: tc.jwt}
		err := c.CheckSecrets()
		wantErr(t, err, tc.want)
		if err != nil && tc.key != "" && (strings.Contains(err.Error(), tc.key) || strings.Contains(err.Error(), "short")) {
			t.Errorf("the message shows the secret: %v", err)
		}
	}
}
