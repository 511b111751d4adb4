// Package config holds the settings of every wsgate subcommand: their
// names, defaults and descriptions, how they are read, and the checks that
// run before anything starts.
//
// A setting has one name, e.g. "redis-url", from which its three spellings
// are derived (contract §1):
//
//	flag  --redis-url
//	env   WSGATE_REDIS_URL
//	YAML  redis_url        (in the file given by --config FILE or WSGATE_CONFIG)
//
// Set.Load applies them with the precedence flag > env > file > default.
// Every value that does not parse, every unknown YAML key and every
// unreadable file is an error naming the setting, where it came from and
// why; the caller prints it as one line and exits with status 2.
//
// Each subcommand has a config struct (Gateway, Allocator, Autoscaler) and a
// constructor that registers its fields in a Set (NewGatewaySet, NewDevSet,
// NewAllocatorSet, NewAutoscalerSet). The usual sequence in main is
//
//	cfg := new(config.Gateway)
//	set := config.NewGatewaySet(cfg)
//	err := set.Load(os.Args[2:], os.LookupEnv) // config.ErrHelp after --help
//	cfg.Finish()                               // derived defaults
//	err = cfg.Validate()                       // first problem, one line
//
// Validate returns the first problem only, as one line that starts with the
// environment name of the setting at fault, e.g.
//
//	WSGATE_PONG_TIMEOUT (10s) must exceed WSGATE_PING_INTERVAL (25s)
//
// Nothing in this package starts goroutines; a Set is not safe for
// concurrent use, and the config structs are read-only once validated.
package config
