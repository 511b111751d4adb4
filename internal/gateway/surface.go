package gateway

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/pprof"
	"net/netip"
	"time"

	"github.com/wsgate/wsgate/internal/admission"
	"github.com/wsgate/wsgate/internal/allocator"
	"github.com/wsgate/wsgate/internal/api"
	"github.com/wsgate/wsgate/internal/cluster"
	"github.com/wsgate/wsgate/web"
)

// The node's HTTP surface (contract §2). Without WSGATE_ADMIN_LISTEN one
// mux carries everything, the profiler for loopback peers only. With it,
// the public listener carries only the paths a client needs (publicMux)
// and the admin listener everything else (adminMux): the server API,
// /metrics, the console and the profiler.

// routes returns the handler of WSGATE_LISTEN and, when an admin
// listener is configured, the handler of WSGATE_ADMIN_LISTEN (else nil).
func (n *Node) routes() (public, admin *http.ServeMux) {
	if n.cfg.AdminListen == "" {
		mux := http.NewServeMux()
		n.clientRoutes(mux)
		n.adminRoutes(mux, true)
		return mux, nil
	}
	public = http.NewServeMux()
	n.clientRoutes(public)
	web.RegisterPublic(public, n.cfg.Dev, n.gate.Origins().CORS)
	admin = http.NewServeMux()
	admin.HandleFunc("GET /healthz", n.serveHealth)
	admin.HandleFunc("GET /readyz", n.serveReady)
	n.allocateRoutes(admin) // for in-cluster callers too
	n.adminRoutes(admin, false)
	return public, admin
}

// clientRoutes are the paths of both layouts that clients use.
func (n *Node) clientRoutes(mux *http.ServeMux) {
	if n.cfg.TransportOn("ws") {
		mux.HandleFunc("GET /ws", n.serveWS)
		mux.HandleFunc("/ws", n.serveWS) // other methods: 400 from the upgrade check
	}
	if n.cfg.TransportOn("sse") {
		mux.HandleFunc("GET /sse", n.serveSSE)
	}
	if n.cfg.TransportOn("stream") {
		mux.HandleFunc("POST /stream", n.serveNDJSON)
		mux.HandleFunc("OPTIONS /stream", n.streamPreflight)
	}
	if n.cfg.TransportOn("sse") || n.cfg.TransportOn("stream") {
		mux.HandleFunc("POST /v1/conn/{conn_id}", n.serveConnPost)
		mux.HandleFunc("OPTIONS /v1/conn/{conn_id}", n.streamPreflight)
	}
	if n.cfg.TransportOn("pusher") {
		mux.HandleFunc("GET /app/{key}", n.servePusher)
	}
	mux.HandleFunc("GET /healthz", n.serveHealth)
	mux.HandleFunc("GET /readyz", n.serveReady)
	n.allocateRoutes(mux)
}

// allocateRoutes serves /v1/allocate, to pages of the origins
// WSGATE_ALLOWED_ORIGINS allows too (CORS, preflights included).
func (n *Node) allocateRoutes(mux *http.ServeMux) {
	h := n.gate.Origins().CORS(http.HandlerFunc(n.serveAllocate))
	mux.Handle("GET /v1/allocate", h)
	mux.Handle("OPTIONS /v1/allocate", h)
}

// adminRoutes are the server API, metrics, console and profiler. With
// loopbackPprof (the shared listener) the profiler answers loopback
// peers only: its cmdline and heap would tell a stranger too much.
func (n *Node) adminRoutes(mux *http.ServeMux, loopbackPprof bool) {
	mux.Handle("GET /metrics", n.devHostOnly(n.metrics.Handler()))
	n.apiH.Register(mux)
	if n.cfg.TransportOn("pusher") {
		n.pusherAPIRoutes(mux)
	}
	web.Register(mux, n.gate.Origins().CORS)
	p := ProfilerHandler()
	if loopbackPprof {
		p = LoopbackOnly(p)
	}
	mux.Handle("/debug/pprof/", n.devHostOnly(p))
}

func (n *Node) serveHealth(w http.ResponseWriter, r *http.Request) {
	api.WriteJSON(w, http.StatusOK, map[string]string{"status": "ok"})
}

// ProfilerHandler serves net/http/pprof under /debug/pprof/.
func ProfilerHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	return mux
}

// LoopbackOnly answers 404 to every peer that is not a loopback address
// (the peer of the socket, or the client a PROXY header named), and to
// requests a proxy forwarded (X-Forwarded-For, X-Real-IP or Forwarded): a
// reverse proxy on the same host is a loopback peer too.
func LoopbackOnly(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		a, err := netip.ParseAddr(admission.PeerIP(r))
		forwarded := r.Header.Get("X-Forwarded-For") != "" || r.Header.Get("X-Real-Ip") != "" || r.Header.Get("Forwarded") != ""
		if err != nil || !a.Unmap().IsLoopback() || forwarded {
			http.NotFound(w, r)
			return
		}
		h.ServeHTTP(w, r)
	})
}

// AdminHandler is the admin listener's handler (nil without
// WSGATE_ADMIN_LISTEN).
func (n *Node) AdminHandler() http.Handler {
	if n.adminMux == nil {
		return nil
	}
	return n.adminMux
}

// ServeAdmin serves the admin plane on ln until Shutdown. It is an error
// without WSGATE_ADMIN_LISTEN.
func (n *Node) ServeAdmin(ln net.Listener) error {
	if n.adminSrv == nil {
		return errors.New("no admin listener configured (WSGATE_ADMIN_LISTEN)")
	}
	var err error
	if n.cfg.TLSCertFile != "" {
		err = n.adminSrv.ServeTLS(ln, n.cfg.TLSCertFile, n.cfg.TLSKeyFile)
	} else {
		err = n.adminSrv.Serve(ln)
	}
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}

func (n *Node) serveReady(w http.ResponseWriter, r *http.Request) {
	if n.Ready() {
		api.WriteJSON(w, http.StatusOK, map[string]string{"status": string(n.Status())})
		return
	}
	w.Header().Set("Retry-After", "5")
	api.WriteError(w, http.StatusServiceUnavailable, "unavailable", n.notReadyReason())
}

func (n *Node) serveAllocate(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), 5*time.Second)
	defer cancel()
	nodes, err := n.backend.Nodes(ctx)
	if err != nil {
		w.Header().Set("Retry-After", "1")
		api.WriteError(w, http.StatusServiceUnavailable, "unavailable", "cluster backend unavailable")
		return
	}
	ServeAllocation(w, &n.alloc, nodes, n.staleAfter())
}

// ServeAllocation answers /v1/allocate from a node list (shared with the
// standalone allocator) with a's choice.
func ServeAllocation(w http.ResponseWriter, a *allocator.Allocator, nodes []cluster.NodeInfo, staleAfter time.Duration) {
	choice, ok := a.Choose(nodes, time.Now(), staleAfter, nil)
	if !ok {
		w.Header().Set("Retry-After", "1")
		api.WriteError(w, http.StatusServiceUnavailable, "unavailable", "no node available")
		return
	}
	api.WriteJSON(w, http.StatusOK, map[string]string{"node": choice.ID, "url": choice.URL})
}
