package bench

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/wsgate/wsgate/client"
	"github.com/wsgate/wsgate/internal/config"
	"github.com/wsgate/wsgate/protocol"
)

// Scenarios of wsgate bench (contract §9).
const (
	ScenarioConnect   = "connect"
	ScenarioBroadcast = "broadcast"
	ScenarioPush      = "push"
	ScenarioRoom      = "room"
	ScenarioChurn     = "churn"
	ScenarioStorm     = "storm"
	ScenarioSend      = "send"
	ScenarioSoak      = "soak"
	ScenarioTicker    = "ticker"
)

// Scenarios lists every scenario in the order of the help.
var Scenarios = []string{ScenarioConnect, ScenarioBroadcast, ScenarioPush, ScenarioRoom, ScenarioChurn, ScenarioStorm, ScenarioSend, ScenarioSoak, ScenarioDownstream, ScenarioTicker}

// defaultRate is the --rate of each scenario when the flag is 0.
var defaultRate = map[string]float64{
	ScenarioBroadcast: 10,   // broadcasts per second
	ScenarioPush:      1000, // user messages per second
	ScenarioRoom:      100,  // room messages per second
	ScenarioChurn:     100,  // connections closed and reopened per second
	ScenarioSend:      1000, // send frames per second
	ScenarioSoak:      5000, // reliable user messages per second
	ScenarioTicker:    100,  // ticker updates per second
}

// soakDuration is the --duration of the soak when the flag is not given.
const soakDuration = 10 * time.Minute

// Config is one bench run. Zero values take the documented defaults
// (withDefaults); Validate names the setting of the first problem.
type Config struct {
	Scenario string

	URLs       []string // --url: gateway WebSocket URLs, connections spread round-robin
	Allocator  string   // --allocator: base URL; each dial asks /v1/allocate first
	API        []string // --api: node HTTP base URLs for publishing; default derived from URLs
	APIKey     string   // --api-key
	JWTSecret  string   // --jwt-secret: mint HS256 tokens (sub = bench-<n>); empty = ?user= (insecure servers)
	Metrics    []string // --metrics: node /metrics URLs; default API + /metrics
	SourceIPs  []netip.Addr
	Conns      int           // --conns
	Users      int           // --users: distinct users (0 = Conns)
	UserOffset int           // --user-offset: the first user is bench-<offset>
	Rooms      int           // --rooms
	Rate       float64       // --rate (0 = the scenario's default)
	Duration   time.Duration // --duration of the load phase
	Settle     time.Duration // --settle: wait after connecting (connect) and bound for stragglers and leak checks
	Ramp       float64       // --ramp: connections opened per second (0 = no pacing)
	Inflight   int           // --inflight: publish requests in flight
	Size       int           // --size: bytes of each message's data
	Fill       string        // --fill: padding of the data, FillX ("" too) or FillText
	Compress   bool          // --deflate: offer permessage-deflate
	Reliable   bool          // --reliable (push only)
	Class      string        // --class: realtime, chat or notify
	Format     protocol.Format
	JSONFile   string        // --json FILE
	HTMLFile   string        // --html FILE
	NoProgress bool          // --quiet
	CPUProfile string        // --cpuprofile FILE
	Reader     string        // --reader: loop (default) or goroutine
	Spin       time.Duration // --spin: the reader loop polls this long before parking
	CAFile     string        // --ca: PEM certificates that verify wss:// and https:// nodes (default: the system's)
	TLS        *tls.Config   `json:"-"` // from CAFile (nil: the system's roots)
	Join       string        // --join ROOM: every connection joins ROOM with a join frame after its welcome
	// Transport (--transport): websocket (default), sse or stream (contract
	// §18; read by a goroutine per connection, frames posted).
	Transport client.Transport

	RunID  string // --run-id: the run's id in every message's data (default random)
	Listen bool   // --listen (connect): count this run's broadcasts published by others (listen.go)
	// RetryInitial (--retry): a first connection attempt that failed for
	// a reason a client retries is tried again with the client's backoff.
	RetryInitial bool
	// Dialing (--dialing) bounds the handshakes in progress at once (0 =
	// maxDialing): with many bench processes on one machine, a small
	// bound makes the connect rate follow what the nodes can take.
	Dialing int

	// EndHold, when it closes, ends the connect scenario's hold before
	// --settle (SIGUSR1 in the CLI).
	EndHold <-chan struct{} `json:"-"`
	// EndRamp, when it closes, stops opening connections (SIGUSR2).
	EndRamp <-chan struct{} `json:"-"`

	Source string // --source (downstream): the source URL the records are written into

	// The soak (soak.go).
	ChurnRate     float64       // --churn-rate: connections closed and reopened per second
	BroadcastRate float64       // --broadcast-rate: broadcasts per second
	SampleEvery   time.Duration // --sample-every: node samples
	Warmup        time.Duration // --warmup: not judged for stability
	TolerancePct  float64       // --tolerance: stability band, percent of the baseline

	Ticker TickerConfig // the ticker scenario (ticker.go)

	// Progress receives the live progress line (nil = none); Run writes
	// one line per second, overwritten when ProgressTTY is set.
	Progress    io.Writer `json:"-"`
	ProgressTTY bool      `json:"-"`
}

// settings holds the raw flag values before they become a Config.
type settings struct {
	url, api, metrics              []string
	allocator, apiKey, jwtSecret   string
	sourceIPs, class, format       string
	conns, users, rooms, inflight  int
	size                           int
	fill                           string
	compression                    bool
	rate, ramp                     float64
	duration, settle               time.Duration
	reliable, quiet                bool
	jsonFile, htmlFile, cpuProfile string
	reader                         string
	transport                      string
	spin                           time.Duration
	caFile                         string
	join                           string
	churnRate, broadcastRate, tol  float64
	sampleEvery, warmup            time.Duration
	runID                          string
	userOffset                     int
	retry                          bool
	dialing                        int
	listen                         bool
	source                         string
	ticker                         tickerSettings
}

// newSet registers every bench setting (flag, WSGATE_ env and YAML key,
// like every other subcommand).
func newSet(s *settings) *config.Set {
	set := config.NewSet("bench")
	set.ArgsUsage = "<" + strings.Join(Scenarios, "|") + ">"
	set.Summary = "Runs a load scenario against gateway nodes and reports connections, message\n" +
		"counts (lost and duplicated counted exactly), end-to-end latency and the nodes'\n" +
		"RSS, goroutines, FDs, GC and CPU read from their /metrics. See docs/bench.md.\n\n" +
		"Scenarios:\n" +
		"  connect    open --conns at --ramp, wait --settle: connect time, RSS and CPU per connection\n" +
		"  broadcast  publish broadcasts at --rate to --conns: latency, loss, CPU per delivered message\n" +
		"  push       per-user messages through /api/v1/publish/batch at --rate (--reliable): latency, loss\n" +
		"  room       --users join --rooms through the API; room messages at --rate: latency, loss\n" +
		"  churn      close and reopen --rate connections per second; checks nothing leaks\n" +
		"  storm      drop every connection at once; reconnect with backoff: time to full reconnection\n" +
		"  send       send frames at --rate to the node's upstream sink: replies ok/unavailable, reply latency, CPU per record\n" +
		"  soak       --conns idle connections, --churn-rate of them reopened per second, --rate reliable user messages and\n" +
		"             --broadcast-rate broadcasts per second for --duration (default 10m): 0 lost, 0 duplicated, node RSS,\n" +
		"             goroutines and descriptors within --tolerance after --warmup\n" +
		"  downstream reliable user messages written at --rate as records into --source (the nodes' WSGATE_DOWNSTREAM_URL):\n" +
		"             write-to-receipt latency, loss, records/s written and delivered\n" +
		"  ticker     --conns in one room, realtime updates with --keys conflation keys at --rate, --slow of the readers slow:\n" +
		"             fast readers get every update, slow ones end with the latest value of each key; conflated count"
	set.List(&s.url, "url", []string{"ws://127.0.0.1:8080/ws"}, "gateway WebSocket URL, or a comma list of node URLs (connections spread round-robin)")
	set.String(&s.allocator, "allocator", "", "allocator base URL (http://host:port); when set, every dial asks /v1/allocate?user= first")
	set.List(&s.api, "api", nil, "comma list of node HTTP base URLs for publishing and room membership").DefaultText("derived from --url")
	set.String(&s.apiKey, "api-key", "", "server API key (Authorization: Bearer); empty for wsgate dev").Secret()
	set.String(&s.jwtSecret, "jwt-secret", "", "HS256 secret: mint a token per connection (sub = bench-<n>); empty = ?user=bench-<n> (insecure servers)").Secret()
	set.Int(&s.conns, "conns", 1000, "connections to open (at most ~19 000 per process: one descriptor each)")
	set.Float(&s.rate, "rate", 0, "messages per second (broadcast, push, room), reconnections per second (churn) or send frames per second (send)").
		DefaultText("0 = scenario default: broadcast 10, push 1000, room 100, churn 100, send 1000")
	set.Duration(&s.duration, "duration", 30*time.Second, "length of the load phase (storm: longest wait for full reconnection)")
	set.String(&s.sourceIPs, "source-ips", "", "source addresses of the dials, round-robin: list, FIRST-LAST range or CIDR (127.0.0.2-127.0.0.40), to pass the ephemeral-port limit")
	set.String(&s.jsonFile, "json", "", "write every figure of the report to this JSON file")
	set.String(&s.htmlFile, "html", "", "write a self-contained HTML report (inline SVG charts) to this file")
	set.Bool(&s.reliable, "reliable", false, "push: publish reliable messages (per-user seq, acknowledged by the bench)")
	set.Int(&s.size, "size", 100, "bytes of each message's data (at least ~60: the data carries index, run and timestamp)")
	set.String(&s.fill, "fill", FillX, "padding of each message's data up to --size: x (a run of x) or text (varied words and numbers, which compress like real JSON text)")
	set.Bool(&s.compression, "deflate", false, "offer permessage-deflate on every connection (the node compresses frames of 512 bytes and more when WSGATE_COMPRESSION is on)")
	set.Duration(&s.settle, "settle", 8*time.Second, "connect: time to wait before measuring; others: longest wait for late messages and for the nodes to return to their baseline")
	set.Int(&s.users, "users", 0, "distinct users bench-0..bench-<users-1> (connection n is user n mod users); 0 = one per connection")
	set.Int(&s.rooms, "rooms", 10, "room: number of rooms (user n joins room n mod rooms)")
	set.List(&s.metrics, "metrics", nil, "comma list of node /metrics URLs").DefaultText("derived from --api")
	set.Float(&s.ramp, "ramp", 2000, "connections opened per second (0 = as fast as possible)")
	set.Int(&s.inflight, "inflight", 4, "publish requests in flight at once")
	set.String(&s.class, "class", "chat", "class of published messages: realtime, chat or notify")
	set.String(&s.format, "format", "json", "frame format of the connections: json or msgpack")
	set.Bool(&s.quiet, "quiet", false, "no progress line")
	set.String(&s.cpuProfile, "cpuprofile", "", "write a CPU profile of the bench process to this file (to check that the bench is not the bottleneck)")
	set.Duration(&s.spin, "spin", 0, "loop reader: keep polling this long after the last frame before sleeping (e.g. 2ms); "+
		"on loopback a sleeping reader's wake-up is paid by the gateway's write, so use it when the bench has a core of its own")
	set.String(&s.caFile, "ca", "", "PEM file of the certificates (or their CA) that verify wss:// and https:// nodes; default: the system's roots")
	set.String(&s.join, "join", "", "connect, broadcast: after its welcome every connection sends a join frame for this room and waits for the reply "+
		"(connect time then includes the join; needs --jwt-secret: the token carries a rooms claim for it)")
	set.Int(&s.userOffset, "user-offset", 0, "users are bench-<offset> .. bench-<offset+users-1>: bench processes given different offsets hold distinct users")
	set.Bool(&s.retry, "retry", false, "a first connection attempt refused for a reason a client retries (503, timeout, reset, join unavailable) "+
		"is tried again with the client's backoff until it succeeds or the run ends; every failure is still counted")
	set.Int(&s.dialing, "dialing", maxDialing, "handshakes in progress at once, at most (with --ramp the upper bound of the connect rate)")
	set.String(&s.runID, "run-id", "", "the run's id in every message's data (default: random); processes that share it count each other's messages")
	set.Bool(&s.listen, "listen", false, "connect: count the broadcasts of --run-id (stream 0) that others publish while the connections are held; "+
		"SIGUSR1 ends the hold before --settle (several bench processes measuring one broadcast: scripts/million.sh)")
	set.String(&s.source, "source", "", "downstream: the source the nodes consume, in WSGATE_DOWNSTREAM_URL's syntax (one URL): "+
		"redis://host:port/db?stream=NAME, nats://host:port?stream=STREAM&subject=SUBJ, kafka://broker:9092/TOPIC")
	set.Float(&s.churnRate, "churn-rate", 200, "soak: connections closed and reopened per second")
	set.Float(&s.broadcastRate, "broadcast-rate", 1, "soak: broadcasts per second")
	set.Duration(&s.sampleEvery, "sample-every", 5*time.Second, "soak: how often the nodes' RSS, goroutines and descriptors are read")
	set.Duration(&s.warmup, "warmup", time.Minute, "soak: the start of the load not judged for stability")
	set.Float(&s.tol, "tolerance", 5, "soak: after --warmup each node's RSS, goroutines and descriptors must stay within this many percent of their baseline")
	set.String(&s.transport, "transport", string(client.WebSocket), "how the connections carry the session: websocket, sse (GET /sse) or stream (POST /stream); "+
		"sse and stream connections are read by a goroutine each and post their frames to /v1/conn/{id}")
	registerTicker(set, &s.ticker)
	set.String(&s.reader, "reader", ReaderLoop, "how the bench reads its connections: loop (an epoll event loop, ws:// only) or goroutine (one goroutine per connection, client.Conn.ReadRaw)")
	return set
}

// toConfig turns the parsed settings into a Config and validates it.
func (s *settings) toConfig(scenario string) (Config, error) {
	cfg := Config{
		Scenario: scenario, URLs: s.url, Allocator: strings.TrimRight(s.allocator, "/"),
		API: s.api, APIKey: s.apiKey, JWTSecret: s.jwtSecret, Metrics: s.metrics,
		Conns: s.conns, Users: s.users, Rooms: s.rooms, Rate: s.rate, Duration: s.duration,
		Settle: s.settle, Ramp: s.ramp, Inflight: s.inflight, Size: s.size, Fill: s.fill, Compress: s.compression, Reliable: s.reliable,
		Class: s.class, JSONFile: s.jsonFile, HTMLFile: s.htmlFile, NoProgress: s.quiet,
		CPUProfile: s.cpuProfile, Reader: s.reader, Transport: client.Transport(s.transport), Spin: s.spin, CAFile: s.caFile, Join: s.join, RunID: s.runID, Listen: s.listen, UserOffset: s.userOffset, RetryInitial: s.retry, Dialing: s.dialing, Source: s.source,
		ChurnRate: s.churnRate, BroadcastRate: s.broadcastRate, SampleEvery: s.sampleEvery, Warmup: s.warmup, TolerancePct: s.tol,
	}
	f, err := protocol.ParseFormat(s.format)
	if err != nil {
		return cfg, fmt.Errorf("--format: %v", err)
	}
	cfg.Format = f
	if cfg.Ticker, err = s.ticker.config(); err != nil {
		return cfg, err
	}
	if s.caFile != "" {
		pem, err := os.ReadFile(s.caFile)
		if err != nil {
			return cfg, fmt.Errorf("--ca: %v", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return cfg, fmt.Errorf("--ca: no PEM certificate in %s", s.caFile)
		}
		cfg.TLS = &tls.Config{RootCAs: pool}
	}
	if s.sourceIPs != "" {
		ips, err := ParseSourceIPs(s.sourceIPs)
		if err != nil {
			return cfg, fmt.Errorf("--source-ips: %v", err)
		}
		cfg.SourceIPs = ips
	}
	cfg = cfg.withDefaults()
	return cfg, cfg.Validate()
}

// withDefaults fills the derived defaults: API from URLs, Metrics from
// API, Users from Conns, Rate from the scenario.
func (c Config) withDefaults() Config {
	if len(c.URLs) == 0 && c.Allocator == "" {
		c.URLs = []string{"ws://127.0.0.1:8080/ws"}
	}
	if len(c.API) == 0 {
		for _, u := range c.URLs {
			if b, err := httpBase(u); err == nil {
				c.API = append(c.API, b)
			}
		}
		if len(c.API) == 0 && c.Allocator != "" {
			c.API = []string{c.Allocator}
		}
	}
	for i, a := range c.API {
		c.API[i] = strings.TrimRight(a, "/")
	}
	if len(c.Metrics) == 0 {
		for _, a := range c.API {
			c.Metrics = append(c.Metrics, a+"/metrics")
		}
	}
	if c.Users == 0 {
		c.Users = c.Conns
	}
	if c.Rate == 0 {
		c.Rate = defaultRate[c.Scenario]
	}
	if c.Class == "" {
		c.Class = "chat"
	}
	if c.Inflight == 0 {
		c.Inflight = 4
	}
	if c.Rooms == 0 {
		c.Rooms = 10
	}
	if c.Reader == "" {
		c.Reader = ReaderLoop
	}
	if c.Transport == "" {
		c.Transport = client.WebSocket
	}
	if c.Scenario == ScenarioDownstream {
		c.Reliable = true // the records are reliable user messages
	}
	if c.Scenario == ScenarioTicker {
		c = c.tickerDefaults()
	}
	if c.Scenario == ScenarioSoak {
		c.Reliable = true // the soak's user messages are reliable
		if c.Duration == 0 {
			c.Duration = soakDuration
		}
		if c.ChurnRate == 0 {
			c.ChurnRate = 200
		}
		if c.BroadcastRate == 0 {
			c.BroadcastRate = 1
		}
		if c.SampleEvery == 0 {
			c.SampleEvery = 5 * time.Second
		}
		if c.TolerancePct == 0 {
			c.TolerancePct = 5
		}
	}
	return c
}

// httpBase turns ws://host:port/ws into http://host:port.
func httpBase(wsURL string) (string, error) {
	u, err := url.Parse(wsURL)
	if err != nil {
		return "", err
	}
	switch u.Scheme {
	case "ws":
		u.Scheme = "http"
	case "wss":
		u.Scheme = "https"
	default:
		return "", fmt.Errorf("not a ws(s) URL")
	}
	return u.Scheme + "://" + u.Host, nil
}

// Validate returns the first problem, naming its flag.
func (c Config) Validate() error {
	known := false
	for _, s := range Scenarios {
		known = known || s == c.Scenario
	}
	if !known {
		return fmt.Errorf("unknown scenario %q: want one of %s", c.Scenario, strings.Join(Scenarios, ", "))
	}
	for _, u := range c.URLs {
		p, err := url.Parse(u)
		if err != nil || (p.Scheme != "ws" && p.Scheme != "wss") || p.Host == "" {
			return fmt.Errorf("--url: want ws(s)://host[:port]/ws, got %q", u)
		}
	}
	check := func(flag string, list []string) error {
		for _, u := range list {
			p, err := url.Parse(u)
			if err != nil || (p.Scheme != "http" && p.Scheme != "https") || p.Host == "" {
				return fmt.Errorf("%s: want http(s)://host[:port], got %q", flag, u)
			}
		}
		return nil
	}
	if c.Allocator != "" {
		if err := check("--allocator", []string{c.Allocator}); err != nil {
			return err
		}
	}
	if err := check("--api", c.API); err != nil {
		return err
	}
	if err := check("--metrics", c.Metrics); err != nil {
		return err
	}
	switch {
	case c.Conns < 1:
		return fmt.Errorf("--conns must be at least 1, got %d", c.Conns)
	case c.Dialing < 0 || c.Dialing > 100000:
		return fmt.Errorf("--dialing must be between 1 and 100000, got %d", c.Dialing)
	case c.UserOffset < 0:
		return fmt.Errorf("--user-offset must not be negative, got %d", c.UserOffset)
	case c.Users < 0:
		return fmt.Errorf("--users must not be negative, got %d", c.Users)
	case c.Rooms < 1:
		return fmt.Errorf("--rooms must be at least 1, got %d", c.Rooms)
	case c.Rate < 0:
		return fmt.Errorf("--rate must not be negative, got %v", c.Rate)
	case c.Duration <= 0:
		return fmt.Errorf("--duration must be positive, got %v", c.Duration)
	case c.Settle < 0:
		return fmt.Errorf("--settle must not be negative, got %v", c.Settle)
	case c.Ramp < 0:
		return fmt.Errorf("--ramp must not be negative, got %v", c.Ramp)
	case c.Inflight < 1 || c.Inflight > 1024:
		return fmt.Errorf("--inflight must be between 1 and 1024, got %d", c.Inflight)
	case c.Size < 0 || c.Size > 1<<20:
		return fmt.Errorf("--size must be between 0 and 1048576, got %d", c.Size)
	case c.Fill != "" && c.Fill != FillX && c.Fill != FillText:
		return fmt.Errorf("--fill must be %s or %s, got %q", FillX, FillText, c.Fill)
	case c.Class != "realtime" && c.Class != "chat" && c.Class != "notify":
		return fmt.Errorf("--class must be realtime, chat or notify, got %q", c.Class)
	case c.Spin < 0 || c.Spin > time.Second:
		return fmt.Errorf("--spin must be between 0 and 1s, got %s", c.Spin)
	case c.Reader != ReaderLoop && c.Reader != ReaderGoroutine:
		return fmt.Errorf("--reader must be %s or %s, got %q", ReaderLoop, ReaderGoroutine, c.Reader)
	case c.Transport != client.WebSocket && c.Transport != client.SSE && c.Transport != client.Stream:
		return fmt.Errorf("--transport must be websocket, sse or stream, got %q", c.Transport)
	case c.Transport != client.WebSocket && (c.Format != protocol.JSON || c.Compress):
		return fmt.Errorf("--transport %s carries JSON frames without compression (contract §18)", c.Transport)
	case c.Reliable && c.Scenario != ScenarioPush && c.Scenario != ScenarioSoak && c.Scenario != ScenarioDownstream:
		return errors.New("--reliable is only for push: reliable delivery is for user targets (contract §5)")
	case len(c.API) == 0 && c.needsAPI():
		return fmt.Errorf("--api is required for %s (node HTTP base URLs)", c.Scenario)
	}
	if err := c.validateJoin(); err != nil {
		return err
	}
	if err := c.validateListen(); err != nil {
		return err
	}
	if err := c.validateSource(); err != nil {
		return err
	}
	if err := c.validateTicker(); err != nil {
		return err
	}
	if c.Scenario == ScenarioSoak {
		switch {
		case c.ChurnRate < 0:
			return fmt.Errorf("--churn-rate must not be negative, got %v", c.ChurnRate)
		case c.BroadcastRate <= 0 || c.BroadcastRate > 1000:
			return fmt.Errorf("--broadcast-rate must be between 0 and 1000, got %v", c.BroadcastRate)
		case c.SampleEvery < 100*time.Millisecond:
			return fmt.Errorf("--sample-every must be at least 100ms, got %s", c.SampleEvery)
		case c.Warmup < 0 || c.Warmup >= c.Duration:
			return fmt.Errorf("--warmup must be between 0 and --duration (%s), got %s", c.Duration, c.Warmup)
		case c.TolerancePct <= 0:
			return fmt.Errorf("--tolerance must be positive, got %v", c.TolerancePct)
		}
	}
	if c.Rate == 0 && c.needsRate() {
		return fmt.Errorf("--rate must be positive for %s", c.Scenario)
	}
	return nil
}

func (c Config) needsAPI() bool {
	return c.Scenario == ScenarioBroadcast || c.Scenario == ScenarioPush || c.Scenario == ScenarioRoom || c.Scenario == ScenarioSoak || c.Scenario == ScenarioTicker
}

func (c Config) needsRate() bool {
	return c.needsAPI() || c.Scenario == ScenarioChurn || c.Scenario == ScenarioSend || c.Scenario == ScenarioDownstream
}
