package config

import (
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"
)

// checker keeps the first problem found; later checks are skipped. Every
// message starts with the environment name of the setting at fault.
type checker struct{ err error }

func (c *checker) failf(format string, a ...any) {
	if c.err == nil {
		c.err = fmt.Errorf(format, a...)
	}
}

func (c *checker) ok() bool { return c.err == nil }

// secret checks a set secret: at least minLen bytes, not a placeholder.
// The message never shows the value.
func (c *checker) secret(name, value string, minLen int) {
	switch {
	case !c.ok() || value == "":
	case strings.HasPrefix(value, SecretPlaceholder):
		c.failf("%s starts with %q: replace the placeholder with a random secret", EnvName(name), SecretPlaceholder)
	case len(value) < minLen:
		c.failf("%s is %d bytes long: at least %d are required (e.g. openssl rand -hex %d)", EnvName(name), len(value), minLen, minLen)
	}
}

// positive checks d > 0.
func (c *checker) positive(name string, d time.Duration) {
	if c.ok() && d <= 0 {
		c.failf("%s (%s) must be positive", EnvName(name), formatDuration(d))
	}
}

// notNegativeDur checks d >= 0.
func (c *checker) notNegativeDur(name string, d time.Duration) {
	if c.ok() && d < 0 {
		c.failf("%s (%s) must not be negative", EnvName(name), formatDuration(d))
	}
}

// intRange checks lo <= v <= hi.
func (c *checker) intRange(name string, v, lo, hi int) {
	if c.ok() && (v < lo || v > hi) {
		c.failf("%s (%d) must be between %d and %d", EnvName(name), v, lo, hi)
	}
}

// atLeast checks v >= lo.
func (c *checker) atLeast(name string, v, lo int) {
	if c.ok() && v < lo {
		c.failf("%s (%d) must be at least %d", EnvName(name), v, lo)
	}
}

// notNegative checks v >= 0 for an int.
func (c *checker) notNegative(name string, v int) {
	if c.ok() && v < 0 {
		c.failf("%s (%d) must not be negative (0 = no limit)", EnvName(name), v)
	}
}

// rate checks v >= 0 for a float.
func (c *checker) rate(name string, v float64) {
	if c.ok() && v < 0 {
		c.failf("%s (%g) must not be negative (0 = no limit)", EnvName(name), v)
	}
}

// oneOf checks that v is one of choices.
func (c *checker) oneOf(name, v string, choices ...string) {
	if !c.ok() {
		return
	}
	for _, ch := range choices {
		if v == ch {
			return
		}
	}
	c.failf("%s (%q) must be %s", EnvName(name), v, orList(choices))
}

// listen checks a host:port listen address with a numeric port.
func (c *checker) listen(name, addr string) {
	if !c.ok() {
		return
	}
	if _, _, err := splitListen(addr); err != nil {
		c.failf("%s (%q) must be host:port, e.g. :8080 or 127.0.0.1:8080: %v", EnvName(name), addr, err)
	}
}

// splitListen splits a listen address and checks its port.
func splitListen(addr string) (host string, port int, err error) {
	host, p, err := net.SplitHostPort(addr)
	if err != nil {
		if ae, ok := err.(*net.AddrError); ok {
			return "", 0, fmt.Errorf("%s", ae.Err)
		}
		return "", 0, err
	}
	port, err = strconv.Atoi(p)
	if err != nil || port < 0 || port > 65535 {
		return "", 0, fmt.Errorf("port %q is not a number from 0 to 65535", p)
	}
	return host, port, nil
}

// redisURL checks a Redis address (empty allowed: embedded backend).
func (c *checker) redisURL(name, v string) {
	if !c.ok() || v == "" {
		return
	}
	if _, err := ParseRedisURL(v); err != nil {
		c.failf("%s (%q) is not a Redis address: %v", EnvName(name), redactURL(v), err)
	}
}

// redisPrefix checks a key prefix: not empty and without the characters
// that Redis gives a meaning in keys and patterns.
func (c *checker) redisPrefix(name, v string) {
	if !c.ok() {
		return
	}
	if v == "" {
		c.failf("%s must not be empty", EnvName(name))
		return
	}
	if i := strings.IndexAny(v, " \t\r\n{}*?[]\\"); i >= 0 {
		c.failf("%s (%q) must not contain %q (white space, braces and glob characters are reserved)",
			EnvName(name), v, v[i])
	}
}

// file checks that path names a readable regular file.
func (c *checker) file(name, path string) {
	if !c.ok() || path == "" {
		return
	}
	fi, err := os.Stat(path)
	if err != nil {
		if pe, ok := err.(*os.PathError); ok {
			err = pe.Err
		}
		c.failf("%s (%q) cannot be read: %v", EnvName(name), path, err)
		return
	}
	if !fi.Mode().IsRegular() {
		c.failf("%s (%q) is not a regular file", EnvName(name), path)
	}
}

// bothOrNeither checks that two settings are given together.
func (c *checker) bothOrNeither(a, av, b, bv string) {
	if c.ok() && (av == "") != (bv == "") {
		c.failf("%s and %s must be set together (both or neither)", EnvName(a), EnvName(b))
	}
}

// logLevel checks a log level name.
func (c *checker) logLevel(name, v string) {
	if !c.ok() {
		return
	}
	if _, err := ParseLogLevel(v); err != nil {
		c.failf("%s (%q) must be debug, info, warn or error", EnvName(name), v)
	}
}

// httpURL checks an http:// or https:// URL (empty allowed).
func (c *checker) httpURL(name, v string) {
	if !c.ok() || v == "" {
		return
	}
	u, err := url.Parse(v)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		c.failf("%s (%q) must be an http:// or https:// URL", EnvName(name), redactURL(v))
	}
}

// ParseLogLevel returns the slog level of debug, info, warn or error
// (case-insensitive).
func ParseLogLevel(s string) (slog.Level, error) {
	switch strings.ToLower(s) {
	case "debug":
		return slog.LevelDebug, nil
	case "info":
		return slog.LevelInfo, nil
	case "warn", "warning":
		return slog.LevelWarn, nil
	case "error":
		return slog.LevelError, nil
	}
	return 0, fmt.Errorf("unknown log level %q (want debug, info, warn or error)", s)
}

// orList writes "a, b or c" with each choice quoted-free.
func orList(choices []string) string {
	switch len(choices) {
	case 0:
		return ""
	case 1:
		return choices[0]
	}
	return strings.Join(choices[:len(choices)-1], ", ") + " or " + choices[len(choices)-1]
}
