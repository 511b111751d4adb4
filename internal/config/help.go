package config

import (
	"fmt"
	"strings"
)

// PrintHelp writes the usage of the subcommand and every visible setting,
// in registration order, to the Set's output:
//
//	--ping-interval duration
//	    env WSGATE_PING_INTERVAL, default 25s
//	    server WebSocket ping period
func (s *Set) PrintHelp() {
	var b strings.Builder
	fmt.Fprintf(&b, "Usage: wsgate %s [flags]", s.Command)
	if s.ArgsUsage != "" {
		fmt.Fprintf(&b, " %s", s.ArgsUsage)
	}
	b.WriteString("\n\n")
	if s.Summary != "" {
		fmt.Fprintf(&b, "%s\n\n", s.Summary)
	}
	b.WriteString("Every setting is a flag, an environment variable and a key of the YAML file\n" +
		"given by --config (the flag name with underscores: redis_url). Precedence:\n" +
		"flag > env > file > default. Durations use Go syntax (25s, 2m, 24h); lists\n" +
		"are comma separated; booleans are true/false/1/0/yes/no.\n\n")
	b.WriteString("Settings:\n")
	b.WriteString("  --config FILE\n      env " + ConfigEnv + "\n      YAML file of settings\n")
	for _, st := range s.settings {
		if st.hidden || st.quiet {
			continue
		}
		fmt.Fprintf(&b, "  %s%s\n      env %s, default %s\n      %s\n",
			st.Flag(), st.kind.placeholder(), st.Env(), helpDefault(st), st.usage)
	}
	fmt.Fprint(s.out, b.String())
}

func helpDefault(st *Setting) string {
	if st.defText != "" {
		return st.defText
	}
	d := st.Default()
	if d == "" || (st.kind == kindString && strings.TrimSpace(d) != d) {
		return fmt.Sprintf("%q", d)
	}
	return d
}
