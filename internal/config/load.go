package config

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
)

// ErrHelp is returned by Load after it printed --help; the caller exits 0.
var ErrHelp = flag.ErrHelp

// SettingError is a value that does not parse.
type SettingError struct {
	Setting string // name of the setting, e.g. "ping-interval"
	Source  Source
	File    string // for FromFile: the file and the line of the value
	Line    int
	Value   string // the text given ("" when the value is not a scalar)
	Err     error  // the reason
}

func (e *SettingError) Error() string {
	var name, from string
	switch e.Source {
	case FromFlag:
		name, from = FlagName(e.Setting), "flag"
	case FromEnv:
		name, from = EnvName(e.Setting), "env"
	case FromFile:
		name, from = FileKey(e.Setting), fmt.Sprintf("file %s:%d", e.File, e.Line)
	default:
		name, from = e.Setting, "default"
	}
	if e.Value == "" && e.Source == FromFile {
		return fmt.Sprintf("invalid setting %s (from %s): %v", name, from, e.Err)
	}
	return fmt.Sprintf("invalid setting %s=%q (from %s): %v", name, e.Value, from, e.Err)
}

func (e *SettingError) Unwrap() error { return e.Err }

// Load sets every setting from its default, then the YAML file (--config
// FILE, else the file named by WSGATE_CONFIG), then the environment (read
// through env, e.g. os.LookupEnv), then the flags in args (the arguments
// after the subcommand). Hidden settings are left alone.
//
// An environment variable or file value that is empty empties a string or
// list setting and is ignored by the other types. A list flag given twice
// adds to the list; any other flag given twice keeps the last value.
//
// With -h or --help in args, Load writes the help text to the Set's output
// and returns ErrHelp. Any other problem is returned as one line.
func (s *Set) Load(args []string, env func(string) (string, bool)) error {
	if env == nil {
		env = func(string) (string, bool) { return "", false }
	}
	s.args, s.file = nil, ""
	for _, st := range s.settings {
		if !st.hidden {
			st.reset()
		}
	}

	flags, configFlag, err := s.parseFlags(args)
	if errors.Is(err, flag.ErrHelp) {
		s.PrintHelp()
		return ErrHelp
	}
	if err != nil {
		return err
	}

	s.file = configFlag
	if s.file == "" {
		s.file, _ = env(ConfigEnv)
	}
	if s.file != "" {
		if err := s.loadFile(s.file); err != nil {
			return err
		}
	}
	for _, st := range s.settings {
		if st.hidden {
			continue
		}
		raw, ok := env(st.Env())
		if !ok {
			continue
		}
		if err := s.apply(st, raw, FromEnv, "", 0); err != nil {
			return err
		}
	}
	for _, fv := range flags {
		raw := fv.raw[len(fv.raw)-1]
		if fv.st.kind == kindList {
			raw = strings.Join(fv.raw, ",")
		}
		if err := s.apply(fv.st, raw, FromFlag, "", 0); err != nil {
			return err
		}
	}
	return s.readSecretFiles()
}

// CheckPlaceholders refuses every secret setting (see Setting.Secret)
// whose value starts with SecretPlaceholder, e.g. WSGATE_UPSTREAM_SECRET
// left at a manifest's CHANGE-ME value.
func (s *Set) CheckPlaceholders() error {
	var v checker
	for _, st := range s.settings {
		if st.redact == hideAll {
			v.secret(st.name, st.current(), 0)
		}
	}
	return v.err
}

// readSecretFiles sets each secret whose _FILE form is set from its file
// (trailing CR LF or LF trimmed). Setting both forms is an error.
func (s *Set) readSecretFiles() error {
	for _, st := range s.settings {
		f := st.fileForm
		if f == nil || f.filePath == "" {
			continue
		}
		if st.source != FromDefault {
			return fmt.Errorf("%s and %s are both set: use one", st.Env(), f.Env())
		}
		b, err := os.ReadFile(f.filePath)
		if err != nil {
			return fmt.Errorf("%s: %v", f.Env(), err)
		}
		v := strings.TrimSuffix(strings.TrimSuffix(string(b), "\n"), "\r")
		if v == "" {
			return fmt.Errorf("%s: %s is empty", f.Env(), f.filePath)
		}
		st.assign(v)
		st.source = f.source
	}
	return nil
}

// apply parses raw and stores it as the value of st from source.
func (s *Set) apply(st *Setting, raw string, src Source, file string, line int) error {
	if src != FromFlag && strings.TrimSpace(raw) == "" && st.emptyIsUnset() {
		return nil
	}
	v, err := st.parse(raw)
	if err != nil {
		return &SettingError{Setting: st.name, Source: src, File: file, Line: line, Value: raw, Err: err}
	}
	st.assign(v)
	st.source = src
	return nil
}

// flagValue records the text given to one flag; Load parses it later so
// that errors have the package's own form and precedence is applied in one
// place.
type flagValue struct {
	st  *Setting
	raw []string
}

func (f *flagValue) String() string { return "" }

func (f *flagValue) Set(v string) error { f.raw = append(f.raw, v); return nil }

func (f *flagValue) IsBoolFlag() bool { return f.st.kind == kindBool }

// parseFlags parses args into the flags that were given, in registration
// order, and the value of --config.
func (s *Set) parseFlags(args []string) ([]*flagValue, string, error) {
	fs := flag.NewFlagSet("wsgate "+s.Command, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	var configFile string
	fs.StringVar(&configFile, "config", "", "")
	values := make([]*flagValue, 0, len(s.settings))
	for _, st := range s.settings {
		if st.hidden {
			continue
		}
		fv := &flagValue{st: st}
		values = append(values, fv)
		fs.Var(fv, st.name, st.usage)
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil, "", err
		}
		return nil, "", fmt.Errorf("%v (see wsgate %s --help)", err, s.Command)
	}
	if fs.NArg() > 0 {
		if s.ArgsUsage == "" {
			return nil, "", fmt.Errorf("unexpected argument %q (see wsgate %s --help)", fs.Arg(0), s.Command)
		}
		s.args = fs.Args()
	}
	given := values[:0]
	for _, fv := range values {
		if len(fv.raw) > 0 {
			given = append(given, fv)
		}
	}
	return given, configFile, nil
}
