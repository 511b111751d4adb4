// Package rooms reads the namespaces of WSGATE_ROOMS_FILE (contract
// section 19): per pattern of room names, the options of the rooms it
// matches. The first namespace whose pattern matches a room wins; a room
// that matches none keeps the defaults (Default), the behaviour of rooms
// before namespaces.
//
// A Set is immutable once parsed: a reload (SIGHUP) parses a new one and
// swaps it in whole.
package rooms

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// Publish modes: who may send a client publish frame to a room.
const (
	PublishClaim   = "claim"   // the token's pub claim decides (the default)
	PublishMembers = "members" // any member connection, without a pub claim
	PublishNone    = "none"    // no client
)

// Scopes of a join frame.
const (
	ScopeUser       = "user"       // the user joins: all its connections, until a leave (the default)
	ScopeConnection = "connection" // only the connection that sent the frame, until its leave or close
)

// MaxHistoryLimit bounds history_limit, as WSGATE_ROOM_HISTORY_LIMIT.
const MaxHistoryLimit = 100000

// Namespace is the options of the rooms matching Pattern. Zero values of
// HistoryLimit and HistoryTTL mean the node's defaults
// (WSGATE_ROOM_HISTORY_LIMIT and WSGATE_ROOM_HISTORY_TTL).
type Namespace struct {
	Pattern      string
	Reliable     bool
	HistoryLimit int
	HistoryTTL   time.Duration
	Presence     bool
	JoinLeave    bool
	Publish      string
	Echo         bool
	MaxMembers   int
	Scope        string
	JoinProxy    string
}

// Default is the namespace of a room that matches none: v2 behaviour.
var Default = &Namespace{Publish: PublishClaim, Echo: true, Scope: ScopeUser}

// TracksPresence reports whether connections of the namespace's rooms are
// kept in the room's presence: with presence or with joined/left frames
// (which are the changes of presence).
func (ns *Namespace) TracksPresence() bool { return ns.Presence || ns.JoinLeave }

// Set is a parsed rooms file.
type Set struct {
	list []*Namespace
}

// Namespaces lists the set's namespaces in the file's order.
func (s *Set) Namespaces() []*Namespace {
	if s == nil {
		return nil
	}
	return s.list
}

// Match returns the first namespace whose pattern matches room, or
// Default. A nil Set matches nothing.
func (s *Set) Match(room string) *Namespace {
	if s != nil {
		for _, ns := range s.list {
			if match(ns.Pattern, room) {
				return ns
			}
		}
	}
	return Default
}

func match(pattern, room string) bool {
	if p, ok := strings.CutSuffix(pattern, "*"); ok {
		return strings.HasPrefix(room, p)
	}
	return pattern == room
}

// Load reads and parses the rooms file at path.
func Load(path string) (*Set, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	s, err := Parse(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return s, nil
}

// file is the YAML layout; unknown keys are refused (a misspelt option
// would otherwise be silently ignored).
type file struct {
	Rooms []struct {
		Pattern      *string `yaml:"pattern"`
		Reliable     bool    `yaml:"reliable"`
		HistoryLimit int     `yaml:"history_limit"`
		HistoryTTL   string  `yaml:"history_ttl"`
		Presence     bool    `yaml:"presence"`
		JoinLeave    bool    `yaml:"join_leave"`
		Publish      string  `yaml:"publish"`
		Echo         *bool   `yaml:"echo"`
		MaxMembers   int     `yaml:"max_members"`
		Scope        string  `yaml:"scope"`
		JoinProxy    string  `yaml:"join_proxy"`
	} `yaml:"rooms"`
}

// Parse parses a rooms file. Its error names the namespace (by its place
// and pattern) and the option at fault, in one line.
func Parse(b []byte) (*Set, error) {
	var f file
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(&f); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, errors.New("the file is empty: it needs a rooms: list")
		}
		return nil, fmt.Errorf("not a rooms file: %s", oneLine(err.Error()))
	}
	s := &Set{}
	for i, r := range f.Rooms {
		at := fmt.Sprintf("rooms[%d]", i)
		if r.Pattern == nil || *r.Pattern == "" {
			return nil, fmt.Errorf("%s: pattern is required", at)
		}
		p := *r.Pattern
		at = fmt.Sprintf("rooms[%d] (%q)", i, p)
		if strings.Contains(strings.TrimSuffix(p, "*"), "*") {
			return nil, fmt.Errorf("%s: pattern: * is allowed only at the end", at)
		}
		ns := &Namespace{Pattern: p, Reliable: r.Reliable, HistoryLimit: r.HistoryLimit, Presence: r.Presence,
			JoinLeave: r.JoinLeave, Publish: r.Publish, Echo: true, MaxMembers: r.MaxMembers, Scope: r.Scope, JoinProxy: r.JoinProxy}
		if r.Echo != nil {
			ns.Echo = *r.Echo
		}
		if ns.HistoryLimit < 0 || ns.HistoryLimit > MaxHistoryLimit {
			return nil, fmt.Errorf("%s: history_limit must be 0 (the default) to %d, got %d", at, MaxHistoryLimit, ns.HistoryLimit)
		}
		if r.HistoryTTL != "" {
			d, err := parseDuration(r.HistoryTTL)
			if err != nil || d <= 0 {
				return nil, fmt.Errorf("%s: history_ttl %q is not a positive duration (like 90s, 24h, 7d)", at, r.HistoryTTL)
			}
			ns.HistoryTTL = d
		}
		switch ns.Publish {
		case "":
			ns.Publish = PublishClaim
		case PublishClaim, PublishMembers, PublishNone:
		default:
			return nil, fmt.Errorf("%s: publish must be claim, members or none, got %q", at, ns.Publish)
		}
		switch ns.Scope {
		case "":
			ns.Scope = ScopeUser
		case ScopeUser, ScopeConnection:
		default:
			return nil, fmt.Errorf("%s: scope must be user or connection, got %q", at, ns.Scope)
		}
		if ns.MaxMembers < 0 {
			return nil, fmt.Errorf("%s: max_members must be 0 (no limit) or more, got %d", at, ns.MaxMembers)
		}
		if ns.JoinProxy != "" {
			u, err := url.Parse(ns.JoinProxy)
			if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
				return nil, fmt.Errorf("%s: join_proxy must be an http(s):// URL, got %q", at, ns.JoinProxy)
			}
		}
		for _, prev := range s.list {
			if prev.Pattern == p {
				return nil, fmt.Errorf("%s: pattern repeats rooms[%d]; the first one would always win", at, indexOf(s.list, prev))
			}
		}
		s.list = append(s.list, ns)
	}
	return s, nil
}

func indexOf(list []*Namespace, ns *Namespace) int {
	for i, x := range list {
		if x == ns {
			return i
		}
	}
	return -1
}

// parseDuration is time.ParseDuration with days ("7d").
func parseDuration(s string) (time.Duration, error) {
	if d, ok := strings.CutSuffix(s, "d"); ok {
		var n int64
		if _, err := fmt.Sscanf(d, "%d", &n); err != nil || fmt.Sprint(n) != d {
			return 0, fmt.Errorf("bad duration %q", s)
		}
		return time.Duration(n) * 24 * time.Hour, nil
	}
	return time.ParseDuration(s)
}

func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }
