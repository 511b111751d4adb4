package config

import (
	"errors"
	"math"
	"net/url"
	"strconv"
	"strings"
	"time"
)

type kind int

const (
	kindString kind = iota
	kindBool
	kindInt
	kindFloat
	kindDuration
	kindList
)

// placeholder is the word shown after the flag in --help.
func (k kind) placeholder() string {
	switch k {
	case kindBool:
		return "[=true|false]"
	case kindInt:
		return " int"
	case kindFloat:
		return " number"
	case kindDuration:
		return " duration"
	case kindList:
		return " list"
	}
	return " string"
}

// redaction says how a secret value is shown by Setting.Value.
type redaction int

const (
	showAll     redaction = iota
	hideAll               // "***" when set
	hideURLPass           // the password of a URL becomes "xxxxx"
)

// Setting is one registered setting. Its name, default and description are
// fixed at registration; Load records the source of its current value.
type Setting struct {
	name    string
	usage   string
	kind    kind
	ptr     any // *string, *bool, *int, *float64, *time.Duration, *[]string
	def     any // value of the same type as *ptr
	defText string
	hidden  bool
	quiet   bool // read as any other, left out of --help
	redact  redaction
	source  Source

	set      *Set     // the Set it belongs to
	fileForm *Setting // a secret's _FILE form (see Secret)
	filePath string   // the value of a _FILE form
}

// Hide leaves the setting out of --help and out of flags, environment and
// file: only code sets it (e.g. the dev subcommand sets Gateway.Dev).
func (st *Setting) Hide() *Setting { st.hidden = true; return st }

// Secret makes Value show "***" instead of the value. A string secret
// also gets a _FILE form (name-file, WSGATE_NAME_FILE, name_file) naming a
// file that Load reads the value from, its trailing newline trimmed, so
// that the secret need not be on the command line or in the environment.
func (st *Setting) Secret() *Setting {
	st.redact = hideAll
	if st.kind == kindString && st.set != nil && st.fileForm == nil {
		f := &Setting{name: st.name + "-file", kind: kindString, def: ""}
		f.ptr = &f.filePath
		f.usage = "file holding " + st.Env() + " (a trailing newline is trimmed); instead of " + st.Flag()
		st.fileForm = st.set.add(f)
	}
	return st
}

// SecretURL makes Value hide the password of a URL value.
func (st *Setting) SecretURL() *Setting { st.redact = hideURLPass; return st }

// DefaultText replaces the default shown by --help, for defaults that are
// computed later (e.g. "hostname-<6 hex digits>").
func (st *Setting) DefaultText(text string) *Setting { st.defText = text; return st }

// Name returns the setting name, e.g. "redis-url".
func (st *Setting) Name() string { return st.name }

// Env returns the environment variable, e.g. "WSGATE_REDIS_URL".
func (st *Setting) Env() string { return EnvName(st.name) }

// Flag returns the flag, e.g. "--redis-url".
func (st *Setting) Flag() string { return FlagName(st.name) }

// Key returns the YAML key, e.g. "redis_url".
func (st *Setting) Key() string { return FileKey(st.name) }

// Usage returns the one-line description.
func (st *Setting) Usage() string { return st.usage }

// Hidden reports whether the setting is hidden (see Hide).
func (st *Setting) Hidden() bool { return st.hidden }

// Source returns where the current value came from.
func (st *Setting) Source() Source { return st.source }

// Default returns the default as text, as --help shows it.
func (st *Setting) Default() string {
	if st.defText != "" {
		return st.defText
	}
	return formatValue(st.def)
}

// Value returns the current value as text, with secrets hidden; meant for
// logging the effective configuration.
func (st *Setting) Value() string {
	v := st.current()
	switch st.redact {
	case hideAll:
		if v != "" {
			return "***"
		}
	case hideURLPass:
		return redactURL(v)
	}
	return v
}

// current returns the field's value as text, secrets included.
func (st *Setting) current() string {
	switch p := st.ptr.(type) {
	case *string:
		return formatValue(*p)
	case *bool:
		return formatValue(*p)
	case *int:
		return formatValue(*p)
	case *float64:
		return formatValue(*p)
	case *time.Duration:
		return formatValue(*p)
	case *[]string:
		return formatValue(*p)
	}
	return ""
}

// reset puts the default back into the field.
func (st *Setting) reset() {
	st.assign(st.def)
	st.source = FromDefault
}

// assign stores v, which has the type parse returns for this setting.
func (st *Setting) assign(v any) {
	switch p := st.ptr.(type) {
	case *string:
		*p = v.(string)
	case *bool:
		*p = v.(bool)
	case *int:
		*p = v.(int)
	case *float64:
		*p = v.(float64)
	case *time.Duration:
		*p = v.(time.Duration)
	case *[]string:
		*p = cloneList(v.([]string))
	}
}

// parse turns the text of a value into the setting's type.
func (st *Setting) parse(raw string) (any, error) {
	s := strings.TrimSpace(raw)
	switch st.kind {
	case kindBool:
		return parseBool(s)
	case kindInt:
		n, err := strconv.Atoi(s)
		if err != nil {
			if errors.Is(err, strconv.ErrRange) {
				return nil, errors.New("integer out of range")
			}
			return nil, errors.New("not an integer")
		}
		return n, nil
	case kindFloat:
		f, err := strconv.ParseFloat(s, 64)
		if err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
			return nil, errors.New("not a finite number")
		}
		return f, nil
	case kindDuration:
		return time.ParseDuration(s)
	case kindList:
		return splitList(s), nil
	}
	return raw, nil
}

// emptyIsUnset reports whether an empty value from the environment or the
// file leaves the setting alone: true for typed settings, whose empty text
// means nothing; false for strings and lists, which it empties.
func (st *Setting) emptyIsUnset() bool {
	return st.kind != kindString && st.kind != kindList
}

func parseBool(s string) (bool, error) {
	switch strings.ToLower(s) {
	case "true", "1", "yes":
		return true, nil
	case "false", "0", "no":
		return false, nil
	}
	return false, errors.New("want true, false, 1, 0, yes or no")
}

func splitList(s string) []string {
	out := []string{}
	for item := range strings.SplitSeq(s, ",") {
		if item = strings.TrimSpace(item); item != "" {
			out = append(out, item)
		}
	}
	return out
}

func cloneList(l []string) []string {
	if l == nil {
		return []string{}
	}
	return append([]string{}, l...)
}

func formatValue(v any) string {
	switch v := v.(type) {
	case string:
		return v
	case bool:
		return strconv.FormatBool(v)
	case int:
		return strconv.Itoa(v)
	case float64:
		return strconv.FormatFloat(v, 'g', -1, 64)
	case time.Duration:
		return formatDuration(v)
	case []string:
		return strings.Join(v, ",")
	}
	return ""
}

// formatDuration prints durations the way the contract writes them: whole
// seconds below 100s as seconds (25s, 60s, 90s), then whole hours or
// minutes (24h, 2m), else Go's form (1m45.5s).
func formatDuration(d time.Duration) string {
	abs := d
	if abs < 0 {
		abs = -abs
	}
	switch {
	case d == 0:
		return "0s"
	case abs%time.Second == 0 && abs < 100*time.Second:
		return strconv.FormatInt(int64(d/time.Second), 10) + "s"
	case abs%time.Hour == 0:
		return strconv.FormatInt(int64(d/time.Hour), 10) + "h"
	case abs%time.Minute == 0:
		return strconv.FormatInt(int64(d/time.Minute), 10) + "m"
	}
	return d.String()
}

// redactURL hides the password of a URL; text that is not a URL with a
// password is returned unchanged.
func redactURL(s string) string {
	at := strings.LastIndex(s, "@")
	scheme := strings.Index(s, "://")
	if at < 0 || scheme < 0 || at < scheme {
		return s
	}
	user := s[scheme+3 : at]
	name, _, hasPass := strings.Cut(user, ":")
	if !hasPass {
		return s
	}
	if u, err := url.Parse(s); err == nil {
		return u.Redacted()
	}
	return s[:scheme+3] + name + ":xxxxx" + s[at:]
}
