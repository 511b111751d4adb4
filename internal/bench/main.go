package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime/debug"
	"runtime/pprof"
	"strings"
	"syscall"
	"time"

	"github.com/wsgate/wsgate/internal/config"
)

// Main runs `wsgate bench <scenario> [flags]` and returns the exit status:
// 0 when the run completed and every check passed, 1 when a check failed
// or the run could not complete (the report is still printed and
// written), 2 for bad flags.
func Main(args []string) int {
	return mainWith(args, os.LookupEnv, os.Stdout, os.Stderr)
}

func mainWith(args []string, env func(string) (string, bool), stdout, stderr io.Writer) int {
	var s settings
	set := newSet(&s)
	set.SetOutput(stdout)
	scenario := ""
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		scenario, args = args[0], args[1:]
	}
	if scenario == ScenarioSoak {
		_ = set.SetDefault("duration", soakDuration.String())
	}
	if err := set.Load(args, env); err != nil {
		if errors.Is(err, config.ErrHelp) {
			return 0
		}
		fmt.Fprintf(stderr, "wsgate bench: %v\n", err)
		return 2
	}
	if rest := set.Args(); len(rest) > 0 {
		if scenario == "" {
			scenario, rest = rest[0], rest[1:]
		}
		if len(rest) > 0 {
			fmt.Fprintf(stderr, "wsgate bench: unexpected argument %q (usage: wsgate bench <scenario> [flags]; see wsgate bench --help)\n", rest[0])
			return 2
		}
	}
	if scenario == "" {
		fmt.Fprintf(stderr, "wsgate bench: missing scenario: want one of %s (see wsgate bench --help)\n", strings.Join(Scenarios, ", "))
		return 2
	}
	cfg, err := s.toConfig(scenario)
	if err != nil {
		fmt.Fprintf(stderr, "wsgate bench: %v\n", err)
		return 2
	}
	if limit := raiseFileLimit(); limit > 0 && uint64(cfg.Conns)+fdReserve > limit {
		fmt.Fprintf(stderr, "wsgate bench: --conns %d needs %d file descriptors, this process may open %d (ulimit -n): raise the limit or run several bench processes\n",
			cfg.Conns, uint64(cfg.Conns)+fdReserve, limit)
		return 2
	}
	if _, ok := env("GOGC"); !ok {
		// The bench's heap is small (tens of MB) and its allocations are
		// per frame: a higher GOGC trades a little memory for less time
		// scanning thousands of goroutine stacks.
		debug.SetGCPercent(400)
	}
	// SIGUSR1 ends the connect hold, SIGUSR2 the ramp (listen.go).
	endHold, endRamp := make(chan struct{}), make(chan struct{})
	usr1, usr2 := make(chan os.Signal, 1), make(chan os.Signal, 1)
	signal.Notify(usr1, syscall.SIGUSR1)
	signal.Notify(usr2, syscall.SIGUSR2)
	defer signal.Stop(usr1)
	defer signal.Stop(usr2)
	holdDone := make(chan struct{})
	defer close(holdDone)
	go func() {
		for usr1 != nil || usr2 != nil {
			select {
			case <-usr1:
				close(endHold)
				usr1 = nil
			case <-usr2:
				close(endRamp)
				usr2 = nil
			case <-holdDone:
				return
			}
		}
	}()
	cfg.EndHold, cfg.EndRamp = endHold, endRamp
	cfg.Progress = stderr
	cfg.ProgressTTY = isTerminal(stderr)

	if cfg.CPUProfile != "" {
		f, err := os.Create(cfg.CPUProfile)
		if err != nil {
			fmt.Fprintf(stderr, "wsgate bench: --cpuprofile: %v\n", err)
			return 2
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			fmt.Fprintf(stderr, "wsgate bench: --cpuprofile: %v\n", err)
			return 2
		}
		defer pprof.StopCPUProfile()
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	rep, err := Run(ctx, cfg)
	if rep == nil {
		fmt.Fprintf(stderr, "wsgate bench: %v\n", err)
		return 1
	}
	rep.WriteSummary(stdout)
	status := 0
	if cfg.JSONFile != "" {
		if werr := writeFile(cfg.JSONFile, rep.WriteJSON); werr != nil {
			fmt.Fprintf(stderr, "wsgate bench: --json: %v\n", werr)
			status = 1
		}
	}
	if cfg.HTMLFile != "" {
		if werr := writeFile(cfg.HTMLFile, rep.WriteHTML); werr != nil {
			fmt.Fprintf(stderr, "wsgate bench: --html: %v\n", werr)
			status = 1
		}
	}
	if err != nil {
		fmt.Fprintf(stderr, "wsgate bench: %v\n", err)
		return 1
	}
	if rep.Failed() {
		return 1
	}
	return status
}

// fdReserve is the descriptors kept for everything but the connections:
// API and metrics clients, report files, the runtime.
const fdReserve = 64

// Run runs one scenario and returns its report. The report is returned
// also when the run fails part-way (ctx canceled, a phase failed), with
// the error; only an invalid cfg gives a nil report. Run owns every
// goroutine it starts and returns when they have all ended.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	cfg = cfg.withDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	r := newRunner(cfg)
	r.startReader()
	r.start = time.Now()
	r.startProgress()
	err := r.scenario(ctx)
	if !r.stopping.Load() {
		r.closeAll() // a phase failed before the close
	}
	timeline := r.prog.finish()
	rep := r.report(timeline, err)
	r.shutdown()
	return rep, err
}

// raiseFileLimit raises the soft descriptor limit to the hard one and
// returns it (0 if unknown).
func raiseFileLimit() uint64 {
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil {
		return 0
	}
	if rl.Cur < rl.Max {
		rl.Cur = rl.Max
		_ = syscall.Setrlimit(syscall.RLIMIT_NOFILE, &rl)
		_ = syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl)
	}
	return rl.Cur
}

// isTerminal reports whether w is a character device (a terminal).
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}
