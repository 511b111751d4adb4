package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/wsgate/wsgate/internal/autoscaler"
	"github.com/wsgate/wsgate/internal/cluster"
	"github.com/wsgate/wsgate/internal/config"
)

// runAutoscaler runs the scaling controller (contract §8): every
// --interval it reads the nodes from the cluster's Redis, decides and acts
// through the actuator; it serves /metrics, /healthz, /readyz and
// /v1/status. SIGTERM or SIGINT stops it; the local actuator then drains
// and stops the nodes it started (a second signal kills them).
func runAutoscaler(args []string) int {
	cfg := new(config.Autoscaler)
	set := config.NewAutoscalerSet(cfg)
	if err := set.Load(args, os.LookupEnv); err != nil {
		if errors.Is(err, config.ErrHelp) {
			return 0
		}
		fmt.Fprintf(os.Stderr, "wsgate autoscaler: %v\n", err)
		return 2
	}
	if err := cfg.Validate(); err != nil {
		fmt.Fprintf(os.Stderr, "wsgate autoscaler: %v\n", err)
		return 2
	}
	lvl, _ := config.ParseLogLevel(cfg.LogLevel)
	log := slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: lvl}))

	// The actuator first: its settings problems are configuration errors.
	act, err := autoscaler.NewActuator(*cfg, log)
	if err != nil {
		fmt.Fprintf(os.Stderr, "wsgate autoscaler: %v\n", err)
		return 2
	}
	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		fmt.Fprintf(os.Stderr, "wsgate autoscaler: WSGATE_LISTEN %q: %v\n", cfg.Listen, err)
		return 2
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	backend, err := cluster.NewRedis(ctx, cluster.RedisOptions{URL: cfg.RedisURL, Prefix: cfg.RedisPrefix, Logger: log})
	cancel()
	if err != nil {
		ln.Close()
		fmt.Fprintf(os.Stderr, "wsgate autoscaler: WSGATE_REDIS_URL: %v\n", err)
		return 2
	}
	defer backend.Close()
	actionTimeout := 5 * time.Minute
	if cfg.Actuator == config.ActuatorExec {
		actionTimeout = max(config.DefaultExecTimeout, cfg.ExecTimeout) + time.Minute
	}
	ctl, err := autoscaler.NewController(autoscaler.Options{
		Policy: autoscaler.PolicyFrom(*cfg), Interval: cfg.Interval, ActionTimeout: actionTimeout,
		Nodes: backend, Actuator: act, Logger: log,
	})
	if err != nil {
		ln.Close()
		fmt.Fprintf(os.Stderr, "wsgate autoscaler: %v\n", err)
		return 2
	}

	srv := &http.Server{Handler: ctl.Handler(), ReadHeaderTimeout: 10 * time.Second}
	serveErr := make(chan error, 1)
	go func() { serveErr <- srv.Serve(ln) }()
	log.Info("autoscaler listening", "listen", ln.Addr().String(), "actuator", act.Name(), "version", version,
		"interval", cfg.Interval.String(), "min_nodes", cfg.MinNodes, "max_nodes", cfg.MaxNodes,
		"max_conns_per_node", cfg.MaxConnsPerNode, "scale_out_at", cfg.ScaleOutAt, "scale_in_at", cfg.ScaleInAt,
		"cpu_out_at", cfg.CPUOutAt, "cpu_in_at", cfg.CPUInAt, "cooldown", cfg.Cooldown.String(), "startup_grace", cfg.StartupGrace.String())

	runCtx, stop := context.WithCancel(context.Background())
	loopDone := make(chan struct{})
	go func() {
		defer close(loopDone)
		ctl.Run(runCtx)
	}()
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	code := 0
	select {
	case err := <-serveErr:
		log.Error("listener failed", "err", err)
		code = 1
	case sig := <-sigs:
		log.Info("signal received: stopping", "signal", sig.String())
	}
	stop()
	<-loopDone

	// The local actuator drains the nodes it started; give them the time
	// a drain may take, and stop waiting at a second signal.
	closeCtx, cancelClose := context.WithTimeout(context.Background(), 3*time.Minute)
	go func() {
		select {
		case <-sigs:
			log.Warn("second signal: stopping without waiting")
			cancelClose()
		case <-closeCtx.Done():
		}
	}()
	if err := act.Close(closeCtx); err != nil {
		log.Warn("actuator close", "err", err.Error())
	}
	cancelClose()
	shutCtx, cancelShut := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancelShut()
	_ = srv.Shutdown(shutCtx)
	log.Info("autoscaler stopped")
	return code
}
