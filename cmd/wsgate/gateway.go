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

	"github.com/wsgate/wsgate/internal/cluster"
	"github.com/wsgate/wsgate/internal/config"
	"github.com/wsgate/wsgate/internal/gateway"
	"github.com/wsgate/wsgate/internal/metrics"
	"github.com/wsgate/wsgate/internal/rooms"
	"github.com/wsgate/wsgate/internal/tracing"
)

// runGateway parses, validates, builds and runs one node; dev runs it
// with the embedded backend and demo auth.
func runGateway(args []string, dev bool) int {
	cfg := new(config.Gateway)
	set := config.NewGatewaySet(cfg)
	if dev {
		set = config.NewDevSet(cfg)
	}
	if err := set.Load(args, os.LookupEnv); err != nil {
		if errors.Is(err, config.ErrHelp) {
			return 0
		}
		fmt.Fprintf(os.Stderr, "wsgate %s: %v\n", set.Command, err)
		return 2
	}
	cfg.Finish()
	err := cfg.Validate()
	if err == nil && !dev {
		err = cfg.CheckSecrets()
	}
	if err == nil && !dev {
		err = set.CheckPlaceholders()
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "wsgate %s: %v\n", set.Command, err)
		return 2
	}
	if dev && cfg.RedisURL != "" {
		fmt.Fprintf(os.Stderr, "wsgate dev: WSGATE_REDIS_URL is set, but dev always runs the embedded backend; use 'wsgate gateway' for a cluster\n")
		return 2
	}
	lvl, _ := config.ParseLogLevel(cfg.LogLevel)
	log := slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: lvl}))
	gateway.Version = version

	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		fmt.Fprintf(os.Stderr, "wsgate %s: WSGATE_LISTEN %q: %v\n", set.Command, cfg.Listen, err)
		return 2
	}
	var adminLn net.Listener
	if cfg.AdminListen != "" {
		if adminLn, err = net.Listen("tcp", cfg.AdminListen); err != nil {
			fmt.Fprintf(os.Stderr, "wsgate %s: WSGATE_ADMIN_LISTEN %q: %v\n", set.Command, cfg.AdminListen, err)
			return 2
		}
		cfg.AdminListen = adminLn.Addr().String() // the bound port (the node record's api_url)
	}
	if cfg.AdvertiseURL == "" {
		cfg.AdvertiseURL = config.AdvertiseURLFor(ln.Addr().String(), cfg.TLSCertFile != "")
	}
	checkFileLimit(log)
	if dev && cfg.APIKey == "" {
		apiAddr := ln.Addr()
		if adminLn != nil {
			apiAddr = adminLn.Addr()
		}
		if !isLoopback(apiAddr) {
			log.Warn("OPEN API: wsgate dev serves the server API without a key on a non-loopback address: "+
				"anyone who can reach it may publish, disconnect users, drain the node and read metrics; "+
				"set WSGATE_API_KEY, or listen on 127.0.0.1", "api_listen", apiAddr.String())
			fmt.Fprintf(os.Stderr, "\n  WARNING: wsgate dev's API is open (no WSGATE_API_KEY) on %s, reachable from other machines.\n\n", apiAddr)
		}
	}
	if cfg.AuthInsecure {
		log.Warn("INSECURE: clients may connect with ?user=ID and no token (WSGATE_AUTH_INSECURE); never run this in production")
	}

	var backend cluster.Backend
	if cfg.RedisURL == "" {
		backend = cluster.NewMemory()
		log.Info("embedded in-process backend: this node cannot form a cluster (set WSGATE_REDIS_URL for that)")
	} else {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		rb, err := cluster.NewRedis(ctx, cluster.RedisOptions{URL: cfg.RedisURL, Prefix: cfg.RedisPrefix, Replicas: cfg.ReliableReplicas, Logger: log})
		cancel()
		if err != nil {
			fmt.Fprintf(os.Stderr, "wsgate %s: WSGATE_REDIS_URL: %v\n", set.Command, err)
			return 2
		}
		backend = rb
	}
	defer backend.Close()

	node, err := gateway.New(*cfg, backend, metrics.New(), log)
	if err != nil {
		fmt.Fprintf(os.Stderr, "wsgate %s: %v\n", set.Command, err)
		return 2
	}
	tracer, err := tracing.FromEnv(context.Background(), "wsgate", cfg.NodeID)
	if err != nil {
		fmt.Fprintf(os.Stderr, "wsgate %s: OTEL_EXPORTER_OTLP_ENDPOINT: %v\n", set.Command, err)
		return 2
	}
	if tracer != nil {
		node.SetTracer(tracer)
		log.Info("exporting trace spans over OTLP/HTTP", "endpoint", os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT")+os.Getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"))
		defer func() {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			if err := tracer.Shutdown(ctx); err != nil {
				log.Warn("trace export at shutdown failed", "err", err)
			}
		}()
	}
	if err := node.Start(context.Background()); err != nil {
		fmt.Fprintf(os.Stderr, "wsgate %s: %v\n", set.Command, err)
		return 1
	}
	log.Info("gateway listening", "listen", ln.Addr().String(), "advertise", cfg.AdvertiseURL, "version", version, "dev", dev)
	serveErr := make(chan error, 2)
	if adminLn != nil {
		log.Info("admin listening: server API, metrics, console and profiler", "admin_listen", adminLn.Addr().String())
		go func() { serveErr <- node.ServeAdmin(adminLn) }()
	}
	if dev {
		fmt.Fprintf(os.Stderr, "\n  wsgate dev is up: console http://%s/  demo chat http://%s/demo\n\n", hostPort(ln.Addr().String()), hostPort(ln.Addr().String()))
	}

	if cfg.DebugListen != "" {
		startProfiler(cfg.DebugListen, log)
	}
	go func() { serveErr <- node.Serve(ln) }()
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	switch {
	case cfg.RoomsFile != "":
		go reloadRoomsOnHangup(node, log, cfg.RoomsFile, rooms.Load)
	case cfg.RoomsConfigFile != "":
		go reloadRoomsOnHangup(node, log, cfg.RoomsConfigFile, config.RoomsOfConfigFile)
	}
	select {
	case err := <-serveErr:
		if err != nil {
			log.Error("listener failed", "err", err)
			return 1
		}
	case sig := <-sigs:
		log.Info("signal received: draining", "signal", sig.String())
		go node.Drain("signal")
		select {
		case <-node.Drained():
		case <-sigs:
			log.Warn("second signal: stopping without waiting for the drain")
		}
	case <-node.Drained():
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	node.Shutdown(ctx)
	log.Info("gateway stopped")
	return 0
}

// reloadRoomsOnHangup reads the namespaces again at each SIGHUP (the
// rooms file, or the rooms: key of the config file): a file that parses
// replaces them (connections stay); one that does not is logged and the
// namespaces in use stay.
func reloadRoomsOnHangup(node *gateway.Node, log *slog.Logger, path string, load func(string) (*rooms.Set, error)) {
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	for range hup {
		set, err := load(path)
		if err != nil {
			log.Error("rooms file not reloaded; the namespaces in use stay", "err", err)
			continue
		}
		node.SetRooms(set)
		log.Info("rooms file reloaded", "path", path, "namespaces", len(set.Namespaces()))
	}
}

// isLoopback reports whether a listener's address is a loopback one (an
// unspecified address listens on every interface: not loopback).
func isLoopback(a net.Addr) bool {
	t, ok := a.(*net.TCPAddr)
	return ok && t.IP.IsLoopback()
}

func hostPort(addr string) string {
	host, port, err := net.SplitHostPort(addr)
	if err != nil || host == "" || host == "::" || host == "0.0.0.0" {
		return "localhost:" + port
	}
	return net.JoinHostPort(host, port)
}

// checkFileLimit raises the soft descriptor limit to the hard one and
// reports it: every connection is a descriptor.
func checkFileLimit(log *slog.Logger) {
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil {
		return
	}
	if rl.Cur < rl.Max {
		rl.Cur = rl.Max
		_ = syscall.Setrlimit(syscall.RLIMIT_NOFILE, &rl)
		_ = syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl)
	}
	if rl.Cur < 10000 {
		log.Warn("open file limit is low: each connection needs a descriptor (raise ulimit -n)", "limit", rl.Cur)
	} else {
		log.Info("open file limit", "limit", rl.Cur)
	}
}

// startProfiler serves net/http/pprof on its own listener (--debug-listen),
// to loopback peers only.
func startProfiler(addr string, log *slog.Logger) {
	go func() {
		log.Info("profiler listening (loopback peers only)", "debug_listen", addr)
		if err := http.ListenAndServe(addr, gateway.LoopbackOnly(gateway.ProfilerHandler())); err != nil {
			log.Error("profiler listener failed", "err", err)
		}
	}()
}
