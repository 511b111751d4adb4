// Command wsgate is the wsgate binary: gateway nodes, the allocator, the
// autoscaler, the load generator and a self-contained dev mode.
//
//	wsgate gateway      one gateway node
//	wsgate dev          one embedded node with demo auth, console and demo chat
//	wsgate allocator    the connection allocator
//	wsgate autoscaler   the scaling controller
//	wsgate bench ...    the load generator
//	wsgate token        prints a client token, or checks one
//	wsgate version      prints the version
//
// `wsgate <command> --help` lists every setting with its environment
// variable and default.
package main

import (
	"fmt"
	"os"

	"github.com/wsgate/wsgate/internal/bench"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "0.1.0-dev"

const usage = `usage: wsgate <command> [flags]

commands:
  gateway      run one gateway node (WebSocket endpoint, server API, metrics, console)
  dev          run one embedded node with demo auth, console and demo chat (no Redis)
  allocator    run the connection allocator
  autoscaler   run the scaling controller
  bench        run the load generator (connect|broadcast|push|room|churn|storm)
  token        print a client token signed with the gateway's secret (--sub USER), or check one (--check TOKEN)
  version      print the version

Run 'wsgate <command> --help' for the settings of a command.
`

func main() {
	os.Exit(run(os.Args[1:]))
}

func run(args []string) int {
	if len(args) == 0 {
		fmt.Fprint(os.Stderr, usage)
		return 2
	}
	cmd, rest := args[0], args[1:]
	switch cmd {
	case "gateway":
		return runGateway(rest, false)
	case "dev":
		return runGateway(rest, true)
	case "allocator":
		return runAllocator(rest)
	case "autoscaler":
		return runAutoscaler(rest)
	case "bench":
		return bench.Main(rest)
	case "token":
		return runToken(rest, os.Stdin, os.Stdout, os.Stderr)
	case "version", "--version", "-v":
		fmt.Println("wsgate", version)
		return 0
	case "help", "--help", "-h":
		fmt.Print(usage)
		return 0
	}
	fmt.Fprintf(os.Stderr, "wsgate: unknown command %q\n\n%s", cmd, usage)
	return 2
}
