package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/wsgate/wsgate/internal/allocator"
	"github.com/wsgate/wsgate/internal/auth"
	"github.com/wsgate/wsgate/internal/cluster"
	"github.com/wsgate/wsgate/internal/config"
	"github.com/wsgate/wsgate/internal/gateway"
	"github.com/wsgate/wsgate/internal/metrics"
)

// runAllocator serves GET /v1/allocate from the cluster's node records.
func runAllocator(args []string) int {
	cfg := new(config.Allocator)
	set := config.NewAllocatorSet(cfg)
	if err := set.Load(args, os.LookupEnv); err != nil {
		if errors.Is(err, config.ErrHelp) {
			return 0
		}
		fmt.Fprintf(os.Stderr, "wsgate allocator: %v\n", err)
		return 2
	}
	if err := cfg.Validate(); err != nil {
		fmt.Fprintf(os.Stderr, "wsgate allocator: %v\n", err)
		return 2
	}
	lvl, _ := config.ParseLogLevel(cfg.LogLevel)
	log := slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: lvl}))
	var backend cluster.Backend
	if cfg.RedisURL == "" {
		log.Warn("no WSGATE_REDIS_URL: every allocation answers 503")
		backend = cluster.NewMemory()
	} else {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		rb, err := cluster.NewRedis(ctx, cluster.RedisOptions{URL: cfg.RedisURL, Prefix: cfg.RedisPrefix, Logger: log})
		cancel()
		if err != nil {
			fmt.Fprintf(os.Stderr, "wsgate allocator: WSGATE_REDIS_URL: %v\n", err)
			return 2
		}
		backend = rb
	}
	defer backend.Close()
	m := metrics.New()
	staleAfter := 3 * cfg.HeartbeatInterval
	mux := http.NewServeMux()
	var alloc allocator.Allocator // its assignments in flight, between heartbeats
	allocate := auth.NewOriginPolicy(cfg.AllowedOrigins).CORS(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), 5*time.Second)
		defer cancel()
		nodes, err := backend.Nodes(ctx)
		if err != nil {
			w.Header().Set("Content-Type", "application/json")
			w.Header().Set("Retry-After", "1")
			w.WriteHeader(http.StatusServiceUnavailable)
			fmt.Fprintf(w, `{"error":{"code":"unavailable","message":"cluster backend unavailable"}}`)
			return
		}
		gateway.ServeAllocation(w, &alloc, nodes, staleAfter)
	}))
	mux.Handle("GET /v1/allocate", allocate)
	mux.Handle("OPTIONS /v1/allocate", allocate)
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) { fmt.Fprintln(w, `{"status":"ok"}`) })
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
		defer cancel()
		if err := backend.Ping(ctx); err != nil {
			w.WriteHeader(http.StatusServiceUnavailable)
			fmt.Fprintln(w, `{"error":{"code":"unavailable","message":"cluster backend unreachable"}}`)
			return
		}
		fmt.Fprintln(w, `{"status":"ok"}`)
	})
	mux.Handle("GET /metrics", m.Handler())
	srv := &http.Server{Addr: cfg.Listen, Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	errc := make(chan error, 1)
	go func() { errc <- srv.ListenAndServe() }()
	log.Info("allocator listening", "listen", cfg.Listen)
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	select {
	case err := <-errc:
		fmt.Fprintf(os.Stderr, "wsgate allocator: WSGATE_LISTEN %q: %v\n", cfg.Listen, err)
		return 2
	case <-sigs:
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	srv.Shutdown(ctx)
	return 0
}
