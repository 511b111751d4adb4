package config

import (
	"go.yaml.in/yaml/v3"

	"fmt"
	"io"
	"os"
	"regexp"
	"strings"
	"time"
)

// EnvPrefix starts the environment name of every setting.
const EnvPrefix = "WSGATE_"

// ConfigEnv names the YAML file when --config is not given.
const ConfigEnv = EnvPrefix + "CONFIG"

// Source says where the value of a setting came from.
type Source int

// Sources, from the lowest precedence to the highest.
const (
	FromDefault Source = iota
	FromFile
	FromEnv
	FromFlag
)

func (s Source) String() string {
	switch s {
	case FromFile:
		return "file"
	case FromEnv:
		return "env"
	case FromFlag:
		return "flag"
	}
	return "default"
}

// EnvName returns the environment variable of a setting name:
// "redis-url" -> "WSGATE_REDIS_URL".
func EnvName(name string) string {
	return EnvPrefix + strings.ToUpper(strings.ReplaceAll(name, "-", "_"))
}

// FlagName returns the command-line flag of a setting name:
// "redis-url" -> "--redis-url".
func FlagName(name string) string { return "--" + name }

// FileKey returns the YAML key of a setting name: "redis-url" -> "redis_url".
func FileKey(name string) string { return strings.ReplaceAll(name, "-", "_") }

// validName is the form every setting name must have (lower case words
// joined by single dashes), so that the three derived names are unambiguous.
var validName = regexp.MustCompile(`^[a-z][a-z0-9]*(-[a-z0-9]+)*$`)

// Set is the named settings of one subcommand. Register settings with the
// typed methods (String, Bool, Int, Float, Duration, List); each writes its
// default into the field at once. Then call Load. A Set is not safe for
// concurrent use.
type Set struct {
	// Command is the subcommand name, used in the usage line ("gateway").
	Command string
	// Summary is an optional sentence shown under the usage line.
	Summary string
	// ArgsUsage, when not empty, allows positional arguments after the
	// flags and describes them in the usage line ("<scenario>"). When it
	// is empty, a positional argument is an error.
	ArgsUsage string

	settings []*Setting
	byName   map[string]*Setting
	byKey    map[string]*Setting
	out      io.Writer
	args     []string
	file     string
	// blocks are top-level keys of the config file that hold a whole
	// structure rather than one setting (the gateway's rooms:), with the
	// function that takes it.
	blocks map[string]func(path string, v *yaml.Node) error
}

// NewSet returns an empty Set for the subcommand cmd.
func NewSet(cmd string) *Set {
	return &Set{
		Command: cmd,
		byName:  map[string]*Setting{},
		byKey:   map[string]*Setting{},
		out:     os.Stdout,
	}
}

// SetOutput sets where --help writes (os.Stdout by default).
func (s *Set) SetOutput(w io.Writer) { s.out = w }

// Args returns the positional arguments left after the flags by the last
// Load (only possible when ArgsUsage is set).
func (s *Set) Args() []string { return s.args }

// ConfigFile returns the YAML file read by the last Load ("" if none).
func (s *Set) ConfigFile() string { return s.file }

// Settings returns every registered setting, hidden ones included, in
// registration order (the order of --help).
func (s *Set) Settings() []*Setting { return s.settings }

// Lookup returns the setting called name, or nil.
func (s *Set) Lookup(name string) *Setting { return s.byName[name] }

// SetDefault changes the default of a registered setting (and its field),
// e.g. the dev subcommand turns auth-insecure on. The new default shows in
// --help.
func (s *Set) SetDefault(name, value string) error {
	st := s.byName[name]
	if st == nil {
		return fmt.Errorf("config: no setting %q", name)
	}
	v, err := st.parse(value)
	if err != nil {
		return fmt.Errorf("config: default of %s: %w", name, err)
	}
	st.def = v
	st.reset()
	return nil
}

// String registers a string setting.
func (s *Set) String(p *string, name, def, usage string) *Setting {
	return s.add(&Setting{name: name, usage: usage, kind: kindString, ptr: p, def: def})
}

// Bool registers a boolean setting; values true/false/1/0/yes/no.
func (s *Set) Bool(p *bool, name string, def bool, usage string) *Setting {
	return s.add(&Setting{name: name, usage: usage, kind: kindBool, ptr: p, def: def})
}

// Int registers an integer setting.
func (s *Set) Int(p *int, name string, def int, usage string) *Setting {
	return s.add(&Setting{name: name, usage: usage, kind: kindInt, ptr: p, def: def})
}

// Float registers a floating-point setting (finite values only).
func (s *Set) Float(p *float64, name string, def float64, usage string) *Setting {
	return s.add(&Setting{name: name, usage: usage, kind: kindFloat, ptr: p, def: def})
}

// Duration registers a duration setting in Go syntax (25s, 2m, 24h).
func (s *Set) Duration(p *time.Duration, name string, def time.Duration, usage string) *Setting {
	return s.add(&Setting{name: name, usage: usage, kind: kindDuration, ptr: p, def: def})
}

// List registers a comma-separated list setting. Items are trimmed and
// empty items dropped. In a YAML file the value may also be a sequence.
func (s *Set) List(p *[]string, name string, def []string, usage string) *Setting {
	return s.add(&Setting{name: name, usage: usage, kind: kindList, ptr: p, def: cloneList(def)})
}

// add registers st; a bad or duplicate name is a programming error.
func (s *Set) add(st *Setting) *Setting {
	if !validName.MatchString(st.name) || st.name == "config" || st.name == "help" {
		panic(fmt.Sprintf("config: invalid setting name %q", st.name))
	}
	if s.byName[st.name] != nil {
		panic(fmt.Sprintf("config: setting %q registered twice", st.name))
	}
	s.settings = append(s.settings, st)
	s.byName[st.name] = st
	s.byKey[FileKey(st.name)] = st
	st.set = s
	st.reset()
	return st
}
