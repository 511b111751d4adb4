/**
 * wsgate.js: the browser client of the wsgate WebSocket gateway.
 *
 * One ES module, no dependencies. It connects (through the allocator when
 * one is given), reconnects with exponential backoff and full jitter,
 * resumes reliable messages with `since`, acknowledges them in batches,
 * drops duplicates, follows `redirect` frames of draining nodes and honours
 * every close code of the wsgate protocol (contract §3, §4). Reliable rooms
 * (§12) resume with `room_since` and deduplicate per room; a stable device
 * id (kept in `localStorage`, the only thing the client stores) names the
 * device whose acknowledgements the server keeps (§4.3); with a token
 * function the token is refreshed in band on `expiring` (§15). With
 * `shared: true` the tabs of one origin share one WebSocket through a
 * SharedWorker that runs this same module. Where WebSocket is blocked the
 * same session runs over Server-Sent Events or HTTP streaming (contract §18):
 * the client falls back by itself (`transports`) and resumes across the
 * change without a duplicate or a hole.
 *
 * This file is the module of the npm package `@wsgate/client` and the one
 * every gateway serves at `/client/wsgate.js`.
 *
 * @example
 * import { Client } from '/client/wsgate.js';
 *
 * const client = new Client({ allocator: location.origin, token: fetchToken });
 * client.on('message', (m) => console.log(m.event, m.data));
 * client.on('state', (s) => console.log(s.state, s.node ?? ''));
 * await client.connect();
 * await client.join('lobby');
 * await client.publish({ type: 'room', id: 'lobby' }, 'chat', { text: 'hi' });
 *
 * @module wsgate
 */

/** Version of this client. */
export const VERSION = '0.1.0-dev';

/** The WebSocket subprotocol of wsgate; always offered. */
export const SUBPROTOCOL = 'wsgate.v1';

/**
 * Close codes of the wsgate protocol (contract §4.4).
 * @readonly
 * @enum {number}
 */
export const CloseCode = Object.freeze({
  /** Normal closure: stop. */
  NORMAL: 1000,
  /** The node shuts down without a target: reconnect with backoff. */
  GOING_AWAY: 1001,
  /** No close frame: the connection broke (synthesised by browsers). */
  ABNORMAL: 1006,
  /** Policy violation (bad frames): stop and report. */
  POLICY_VIOLATION: 1008,
  /** A frame was too big: stop and report. */
  TOO_BIG: 1009,
  /** The node drains: reconnect at once (to the redirect URL if one came). */
  DRAINING: 4001,
  /** Disconnected by the server API: stop. */
  DISCONNECTED: 4003,
  /** Slow consumer (outbound queue overflowed): reconnect and resume. */
  SLOW_CONSUMER: 4008,
  /** Replaced by a newer connection of the same user: stop. */
  REPLACED: 4009,
  /** The token expired: get a new token and reconnect. */
  TOKEN_EXPIRED: 4401,
  /** Message rate exceeded: reconnect after backoff. */
  RATE_LIMITED: 4429,
});

/**
 * What the client does after a close.
 * @typedef {'stop'|'backoff'|'now'|'refresh'} CloseAction
 */

/**
 * Maps a close code to the client's action (contract §4.4): `stop` for
 * 1000, 1008, 1009, 4003 and 4009; `now` (reconnect at once, with a small
 * jitter) for 4001; `refresh` (new token, then reconnect at once) for 4401;
 * `backoff` for everything else, including 1001, 4008, 4429 and broken
 * connections (1006).
 * @param {number} code
 * @returns {CloseAction}
 */
export function closeAction(code) {
  switch (code) {
    case CloseCode.NORMAL:
    case CloseCode.POLICY_VIOLATION:
    case CloseCode.TOO_BIG:
    case CloseCode.DISCONNECTED:
    case CloseCode.REPLACED:
      return 'stop';
    case CloseCode.DRAINING:
      return 'now';
    case CloseCode.TOKEN_EXPIRED:
      return 'refresh';
    default:
      return 'backoff';
  }
}

/**
 * The delay before retry number `attempt` (from 0) with full jitter:
 * uniform in [0, min(maxMs, minMs * 2^attempt)]. Full jitter spreads a
 * fleet's reconnects over the whole window instead of synchronising them
 * after an outage.
 * @param {number} attempt retry number, from 0
 * @param {number} minMs the first ceiling (1000 by default in Client)
 * @param {number} maxMs the largest ceiling (30000 by default in Client)
 * @param {() => number} [random] a source of numbers in [0, 1)
 * @returns {number} milliseconds
 */
export function backoffDelay(attempt, minMs, maxMs, random = Math.random) {
  const cap = Math.min(maxMs, minMs * 2 ** Math.min(Math.max(attempt, 0), 31));
  return Math.floor(random() * (cap + 1));
}

/**
 * An error of a request (`join`, `leave`, `publish`, `ping`) or of the
 * connection. `code` is the server's error code (`forbidden`,
 * `bad_request`, `unavailable`, ...) or one of the client's own:
 * `not_connected` (no open connection), `connection_lost` (the connection
 * ended before the reply), `timeout` (no reply within `requestTimeout`),
 * `closed` (close() was called), `stopped` (the server closed with a code
 * that means stop).
 */
export class WsgateError extends Error {
  /**
   * @param {string} code
   * @param {string} message
   * @param {{closeCode?: number, closeReason?: string}} [extra]
   */
  constructor(code, message, extra = {}) {
    super(message);
    this.name = 'WsgateError';
    /** @type {string} */
    this.code = code;
    /** Close code when the error comes from a close. @type {number|undefined} */
    this.closeCode = extra.closeCode;
    /** @type {string|undefined} */
    this.closeReason = extra.closeReason;
  }
}

/**
 * Connection state.
 * - `connecting`: the first connection is being made;
 * - `open`: the welcome arrived, frames flow;
 * - `reconnecting`: the connection ended and another one is scheduled or
 *   under way;
 * - `closed`: the client stopped (close(), or a close code that means stop).
 * @typedef {'connecting'|'open'|'reconnecting'|'closed'} State
 */

/**
 * @typedef {object} ClientOptions
 * @property {string} [url] WebSocket URL of a node (`ws://host:port/ws`);
 *   relative and http(s) URLs are resolved against the page. Used when no
 *   allocator is given, or when the allocator cannot answer. Default: `/ws`
 *   of the page's host.
 * @property {string} [allocator] base URL of an allocator (a gateway or
 *   `wsgate allocator`); each connection asks `GET <allocator>/v1/allocate?user=`
 *   for a node.
 * @property {string} [user] user id for servers in insecure mode (sent as
 *   `?user=` when there is no token) and for the allocator's query.
 * @property {string|(() => (string|Promise<string>))} [token] a JWT, or a
 *   function returning one (possibly async). The function is called for the
 *   first connection, after close 4401 (token expired) and after a handshake
 *   that failed before the welcome; its result is kept in memory otherwise.
 *   The token travels as the `bearer.<jwt>` subprotocol next to `wsgate.v1`.
 * @property {'json'} [format] wire format; only `json` is supported.
 * @property {number} [minBackoff] first backoff ceiling in ms (1000).
 * @property {number} [maxBackoff] largest backoff ceiling in ms (30000).
 * @property {number} [ackEvery] acknowledge after this many reliable
 *   messages (20).
 * @property {number} [ackDelay] or this many ms after the first
 *   unacknowledged one (200).
 * @property {number} [since] resume point of the first connection (a seq the
 *   application kept); later connections resume from the last seq received.
 * @property {number} [requestTimeout] ms to wait for a reply (10000).
 * @property {number} [handshakeTimeout] ms for the allocator, the upgrade and
 *   the welcome together (10000).
 * @property {number} [pongTimeout] ms of silence past the ping interval after
 *   which a connection is considered dead (10000).
 * @property {typeof WebSocket} [WebSocket] WebSocket constructor (for
 *   runtimes without a global one, and tests).
 * @property {typeof fetch} [fetch] fetch function (for tests).
 * @property {() => number} [random] random source in [0, 1) (for tests).
 * @property {string|null} [device] the device id sent as `device`
 *   (`[A-Za-z0-9_.-]{1,64}`). Default: one generated once and kept in
 *   `localStorage` under `wsgate.device` (in memory where there is no
 *   storage). `null` sends none (the server's `default` device).
 * @property {Storage} [storage] where the device id is kept (default
 *   `localStorage`).
 * @property {Record<string, number>} [roomSince] resume points of reliable
 *   rooms for the first connection (room to seq, positions the application
 *   kept); later connections resume from the last seq received per room.
 * @property {string} [api] base URL of a server API the page may call (a
 *   `wsgate dev` node, or the application's own proxy of it): history()
 *   then reads `GET <api>/api/v1/rooms/{room}/history` instead of joining
 *   with `since`.
 * @property {Record<string, string>} [apiHeaders] headers of those calls.
 * @property {boolean} [shared] share one WebSocket between the tabs of this
 *   origin through a SharedWorker (falls back to one connection per tab
 *   where SharedWorker is missing).
 * @property {string|URL} [sharedWorkerUrl] the module the SharedWorker runs
 *   (default: this module's own URL; it must be of the page's origin).
 * @property {string} [sharedName] name of the SharedWorker: tabs with the
 *   same name share a connection (default: from url, allocator and user).
 * @property {Transport[]} [transports] the transports to try, in order
 *   (default `['websocket', 'sse', 'stream']`). When a WebSocket cannot be
 *   opened, or a transport closes twice before a `welcome`, the next one is
 *   tried at once; after a connection on a fallback transport ends, the
 *   first is tried again (a fallback is not kept for good: a node that was
 *   down refuses WebSocket too).
 */

/**
 * A way to carry the session (contract §18): `websocket` (`/ws`), `sse`
 * (`GET /sse`, Server-Sent Events) or `stream` (`POST /stream`, one frame
 * per line); on the last two the client's frames go by `POST /v1/conn/{id}`.
 * @typedef {'websocket'|'sse'|'stream'} Transport
 */

/**
 * A pushed message (contract §4.1).
 * @typedef {object} Message
 * @property {string} id
 * @property {string} event
 * @property {*} data
 * @property {number} ts publish time, Unix ms
 * @property {{type: string, id: string}} target
 * @property {number} [seq] present exactly for reliable messages: per user
 *   for user targets, per room for reliable rooms
 * @property {string} [from] the user whose `publish` frame sent it (set by
 *   the server)
 */

/**
 * Detail of the `state` event.
 * @typedef {object} StateDetail
 * @property {State} state
 * @property {State} previous
 * @property {string|null} node the node serving the connection (when open)
 * @property {number} attempt reconnects since the last healthy connection
 * @property {number} [delay] ms until the next attempt (reconnecting)
 * @property {number} [code] close code that caused the change
 * @property {string} [reason]
 * @property {string} [url] redirect target, when one is followed
 */

const TRANSPORTS = Object.freeze(['websocket', 'sse', 'stream']);

const DEFAULTS = Object.freeze({
  format: 'json',
  minBackoff: 1000,
  maxBackoff: 30000,
  ackEvery: 20,
  ackDelay: 200,
  requestTimeout: 10000,
  handshakeTimeout: 10000,
  pongTimeout: 10000,
  queueLimit: 100,
});

/** Max jitter of an "at once" reconnect (4001, 4401), in ms. */
const QUICK_JITTER = 250;
/** "At once" reconnects allowed in a row before the backoff takes over. */
const MAX_QUICK = 3;
/** A connection older than this (ms) resets the backoff. */
const STABLE_AFTER = 10000;

const hasWindow = typeof window !== 'undefined' && typeof window.addEventListener === 'function';

/**
 * The wsgate client. It is an `EventTarget`: listen with
 * `addEventListener(type, e => e.detail)` or with the shorter
 * {@link Client#on}. Events:
 *
 * | type | detail |
 * | --- | --- |
 * | `state` | {@link StateDetail} |
 * | `welcome` | the welcome frame: `{conn_id, node, user, ping_interval_ms, inbox_seq, device, rooms, transport}` |
 * | `open` | `{transport, conn_id, node}`: a connection opened (its welcome came), on that transport |
 * | `message` | {@link Message} |
 * | `gap` | `{from, to, missed, target?}`: reliable messages that will never come (`target` `{type:'room', id}` for a room) |
 * | `expiring` | `{exp}`: the token expires at `exp` (Unix s), 30 s from now |
 * | `refresh` | `{ok, exp?, code?, message?}`: an in-band token refresh ended |
 * | `redirect` | `{url, reason, retry_after_ms}`: the node drains |
 * | `error` | `{code, message}`: an `error` frame no request was waiting for, a refused connection, a stop code (1008, 1009) |
 * | `close` | `{code, reason, wasClean, reconnect, delay}` for every connection or attempt that ends |
 *
 * Handlers run synchronously; an exception in a handler is reported and does
 * not break the client.
 */
export class Client extends EventTarget {
  /** @type {Required<Pick<ClientOptions, 'format'|'minBackoff'|'maxBackoff'|'ackEvery'|'ackDelay'|'requestTimeout'|'handshakeTimeout'|'pongTimeout'>> & ClientOptions} */
  #o;
  #WS;
  #fetch;
  #random;

  /** @type {State} */
  #state = 'closed';
  #running = false;
  /** Generation of the current connection; stale callbacks compare it. */
  #gen = 0;
  /** The current socket: a WebSocket or an {@link HttpStreamSocket}. @type {WebSocket|HttpStreamSocket|null} */
  #ws = null;
  /** @type {Transport[]} */
  #transports;
  #tIndex = 0; // the transport the next dial uses
  #tFails = 0; // closes before a welcome on it
  #tTried = 0; // transports moved past since the last welcome
  #sockOpened = false; // the current socket opened (a WebSocket's open event)
  #target = null; // the node URL of the current attempt, before its query
  /** @type {Transport|null} */
  #transport = null;
  #opened = false; // the welcome of #ws arrived
  #openedAt = 0;
  #gotMessage = false;
  #lastRecv = 0;
  #timer = null; // reconnect timer
  #welcomeTimer = null;
  #beat = null;
  #lastBeat = 0;
  #ackTimer = null;
  #attempt = 0;
  #quick = 0;
  /** @type {{url: string, after: number}|null} */
  #redirect = null;
  #currentUrl = null;

  #token = null;
  #needToken = true;

  #lastSeq = 0;
  #hasSeq = false;
  #ackedSeq = 0;
  #unacked = 0;

  /** @type {string|null} */
  #device = null;
  /** Reliable rooms: room to the highest seq received (or the base). @type {Map<string, number>} */
  #rooms = new Map();
  /** history() calls collecting a room's replay. @type {Set<{room: string, since: number, got: Message[]}>} */
  #collectors = new Set();
  #refreshing = null;
  /** The shared connection of this tab, when options.shared found a SharedWorker. */
  #link = null;

  #nextId = 1;
  /** @type {Map<string, {resolve: Function, reject: Function, timer: any}>} */
  #pending = new Map();
  /** @type {Map<number, {resolve: Function, reject: Function, timer: any, sent: number}>} */
  #pings = new Map();
  #lastPingTs = 0;
  /** @type {Array<{resolve: Function, reject: Function}>} */
  #waiters = [];
  /** Requests made while (re)connecting, sent in order after the next welcome. @type {Array<{frame: object, resolve: Function, reject: Function}>} */
  #queue = [];
  /** Listeners of one message event name (`client.on('chat.say', fn)`). */
  #byEvent = new EventTarget();
  #welcome = null;
  #onOnline = () => this.#online();

  #stats = { connects: 0, reconnects: 0, messages: 0, duplicates: 0, acks: 0, gaps: 0, missed: 0, refreshes: 0 };

  /**
   * @param {ClientOptions} [options]
   */
  constructor(options = {}) {
    super();
    const o = { ...DEFAULTS, ...stripUndefined(options) };
    if (o.format !== 'json') {
      throw new TypeError(`wsgate: format ${JSON.stringify(o.format)} is not supported by wsgate.js (only "json")`);
    }
    for (const k of ['minBackoff', 'maxBackoff', 'ackEvery', 'requestTimeout', 'handshakeTimeout', 'pongTimeout']) {
      if (!(Number.isFinite(o[k]) && o[k] > 0)) throw new TypeError(`wsgate: ${k} must be a positive number, got ${o[k]}`);
    }
    if (!(Number.isFinite(o.ackDelay) && o.ackDelay >= 0)) throw new TypeError(`wsgate: ackDelay must be >= 0, got ${o.ackDelay}`);
    if (!(Number.isInteger(o.queueLimit) && o.queueLimit >= 0)) throw new TypeError(`wsgate: queueLimit must be an integer >= 0, got ${o.queueLimit}`);
    if (o.maxBackoff < o.minBackoff) throw new TypeError('wsgate: maxBackoff must be >= minBackoff');
    if (o.token != null && typeof o.token !== 'string' && typeof o.token !== 'function') {
      throw new TypeError('wsgate: token must be a string or a function returning one');
    }
    if (o.since != null) {
      if (!(Number.isInteger(o.since) && o.since >= 0)) throw new TypeError('wsgate: since must be a non-negative integer');
      this.#lastSeq = o.since;
      this.#ackedSeq = o.since;
      this.#hasSeq = true;
    }
    this.#WS = o.WebSocket ?? globalThis.WebSocket;
    this.#fetch = o.fetch ?? globalThis.fetch?.bind(globalThis);
    this.#random = o.random ?? Math.random;
    if (typeof this.#WS !== 'function') throw new TypeError('wsgate: no WebSocket implementation (pass options.WebSocket)');
    if (!o.url && !o.allocator && !(hasWindow && window.location)) throw new TypeError('wsgate: give options.url or options.allocator');
    if (o.roomSince != null) {
      for (const [room, seq] of Object.entries(o.roomSince)) {
        if (!(Number.isInteger(seq) && seq >= 0)) throw new TypeError(`wsgate: roomSince[${JSON.stringify(room)}] must be a non-negative integer`);
        this.#rooms.set(room, seq);
      }
    }
    this.#device = resolveDevice(o.device, o.storage);
    this.#transports = checkTransports(o.transports);
    this.#o = o;
    if (o.shared && typeof SharedWorker === 'function' && !inWorker) {
      try {
        this.#link = new SharedLink(this, o, this.#device, (type, detail) => this.#emit(type, detail));
      } catch {
        this.#link = null; // a worker that cannot start: one connection for this tab
      }
    }
  }

  // ---- public state -------------------------------------------------------

  /** The connection state. @type {State} */
  get state() { return this.#link ? this.#link.snap.state : this.#state; }
  /** Node serving the open connection, else null. @type {string|null} */
  get node() { return this.#link ? this.#link.snap.node : this.#opened ? this.#welcome?.node ?? null : null; }
  /** Connection id of the open connection, else null. @type {string|null} */
  get connId() { return this.#link ? this.#link.snap.connId : this.#opened ? this.#welcome?.conn_id ?? null : null; }
  /** User id the server gave the last connection. @type {string|null} */
  get user() { return this.#link ? this.#link.snap.user ?? this.#o.user ?? null : this.#welcome?.user ?? this.#o.user ?? null; }
  /** The last welcome frame, or null. */
  get welcome() {
    const w = this.#link ? this.#link.snap.welcome : this.#welcome;
    return w ? { ...w } : null;
  }
  /** Highest reliable user seq received (0 when none). @type {number} */
  get lastSeq() { return this.#link ? this.#link.snap.lastSeq : this.#lastSeq; }
  /** URL of the current or last connection. @type {string|null} */
  get url() { return this.#link ? this.#link.snap.url : this.#currentUrl; }
  /** The device id sent as `device`, or null. @type {string|null} */
  get device() { return this.#device; }
  /** Positions of the reliable rooms: room to the highest seq received (a copy). @type {Record<string, number>} */
  get rooms() { return this.#link ? { ...this.#link.snap.rooms } : Object.fromEntries(this.#rooms); }
  /** The transport of the open connection (or of the attempt under way), else null. @type {Transport|null} */
  get transport() { return this.#link ? this.#link.snap.transport ?? null : this.#transport; }
  /** True when this tab shares a SharedWorker's connection. @type {boolean} */
  get shared() { return this.#link != null; }
  /** Counters since construction (a copy; of the shared connection in shared mode). */
  get stats() { return this.#link ? { ...this.#link.snap.stats } : { ...this.#stats, lastSeq: this.#lastSeq, ackedSeq: this.#ackedSeq }; }

  /** The snapshot a SharedWorker sends its tabs. @internal */
  snapshot() {
    return {
      state: this.#state, node: this.node, connId: this.connId, user: this.user, welcome: this.welcome,
      lastSeq: this.#lastSeq, url: this.#currentUrl, rooms: this.rooms, stats: this.stats, transport: this.#transport,
    };
  }

  /**
   * Adds a listener that receives the event's detail. Returns a function
   * that removes it. `type` is one of the client's events (`state`,
   * `welcome`, `open`, `message`, `gap`, `redirect`, `error`, `close`,
   * `expiring`, `refresh`, `joined`, `left`), or else the name of a message event: then `fn`
   * gets every message whose `event` is that name (`client.on('chat.say',
   * (m) => ...)`), after the `message` listeners got it.
   * @param {string} type
   * @param {(detail: any) => void} fn
   * @returns {() => void}
   */
  on(type, fn) {
    const h = (e) => fn(e.detail);
    const target = EVENT_TYPES.includes(type) ? this : this.#byEvent;
    target.addEventListener(type, h);
    return () => target.removeEventListener(type, h);
  }

  // ---- lifecycle -----------------------------------------------------------

  /**
   * Starts connecting (if not already running) and keeps the client
   * connected until {@link Client#close} or a close code that means stop.
   * The promise resolves with the welcome of the next open connection (at
   * once if one is open), and rejects with a {@link WsgateError} if the
   * client stops first. Calling it after close() starts again and resumes
   * from the last seq received.
   * @returns {Promise<object>} the welcome frame
   */
  connect() {
    if (this.#link) return this.#link.call('connect', []);
    const p = new Promise((resolve, reject) => {
      if (this.#running && this.#opened) {
        resolve({ ...this.#welcome });
        return;
      }
      this.#waiters.push({ resolve, reject });
    });
    p.catch(() => {}); // a caller that does not await must not see an unhandled rejection
    if (!this.#running) {
      this.#running = true;
      this.#attempt = 0;
      this.#quick = 0;
      this.#tIndex = 0;
      this.#tFails = 0;
      this.#tTried = 0;
      if (hasWindow) window.addEventListener('online', this.#onOnline);
      this.#setState('connecting', {});
      this.#dial();
    }
    return p;
  }

  /**
   * Stops the client: acknowledges what was received, closes the
   * connection with 1000 and cancels any reconnect. Pending requests are
   * rejected with code `closed`. The promise resolves when the socket is
   * closed (at most one second later).
   * @returns {Promise<void>}
   */
  close() {
    if (this.#link) return this.#link.detach();
    const ws = this.#ws;
    const wasOpen = this.#opened;
    this.#stop('closed', 'closed by the client', CloseCode.NORMAL, 'closed by the client');
    if (!ws) return Promise.resolve();
    return new Promise((resolve) => {
      if (ws.readyState === 3) { resolve(); return; }
      const t = setTimeout(resolve, 1000);
      ws.addEventListener('close', () => { clearTimeout(t); resolve(); }, { once: true });
      try {
        if (wasOpen && ws.readyState === 1) this.#flushAckOn(ws);
        ws.close(CloseCode.NORMAL, 'client closed');
      } catch { resolve(); }
    });
  }

  // ---- requests ------------------------------------------------------------

  /**
   * Joins a room with the user's identity (all the user's connections get
   * the room, contract §4.2). Resolves with the reply frame. For a reliable
   * room whose position the client knows, it joins with `since` = that
   * position, so what was missed comes first (§12); `options.since` sets
   * the position (0: the whole kept history). `options.token` is a room
   * token (a JWT with `sub` and `room`) that allows the join; `options.data`
   * goes to the room's join proxy, if its namespace has one.
   * @param {string} room
   * @param {{since?: number, token?: string, data?: any}} [options]
   * @returns {Promise<{type: 'reply', id: string, ok: true}>}
   */
  join(room, options = {}) {
    if (this.#link) return this.#link.call('join', [room, options]);
    room = String(room);
    const frame = { type: 'join', room };
    if (options.token != null) frame.token = String(options.token);
    if (options.data !== undefined) frame.data = options.data;
    const since = options.since ?? this.#rooms.get(room);
    if (since != null) {
      if (!(Number.isInteger(since) && since >= 0)) return Promise.reject(new WsgateError('bad_request', 'wsgate: since must be a non-negative integer'));
      frame.since = since;
      if (options.since != null && (this.#rooms.get(room) ?? Infinity) > since) this.#rooms.set(room, since);
    }
    return this.#request(frame);
  }

  /**
   * Leaves a room. Resolves with the reply frame. In shared mode the room
   * is left on the server once no other tab holds it.
   * @param {string} room
   * @returns {Promise<{type: 'reply', id: string, ok: true}>}
   */
  leave(room) {
    if (this.#link) return this.#link.call('leave', [room]);
    room = String(room);
    return this.#request({ type: 'leave', room }).then((r) => { this.#rooms.delete(room); return r; });
  }

  /**
   * The kept messages of a reliable room with seq > `since`, oldest first,
   * at most `limit` (default 100): `{seq, messages}` as the server API's
   * history answer. With `options.api` it reads the API's history
   * endpoint; otherwise it joins the room with `since` and collects the
   * replay until the reply (the user becomes a member; messages past the
   * client's position are also emitted as `message` events). A connection
   * never gets a room message twice, so the join form returns only what
   * this connection has not received yet.
   * @param {string} room
   * @param {{since?: number, limit?: number}} [options]
   * @returns {Promise<{seq: number, messages: Message[]}>}
   */
  async history(room, options = {}) {
    if (this.#link) return this.#link.call('history', [room, options]);
    room = String(room);
    if (options.before != null || options.reverse) return this.#historyPage(room, options);
    const since = options.since ?? 0;
    const limit = options.limit ?? 100;
    if (!(Number.isInteger(since) && since >= 0)) throw new WsgateError('bad_request', 'wsgate: since must be a non-negative integer');
    if (!(Number.isInteger(limit) && limit > 0)) throw new WsgateError('bad_request', 'wsgate: limit must be a positive integer');
    if (this.#o.api) return this.#fetchHistory(room, since, limit);
    const c = { room, since, got: [] };
    this.#collectors.add(c);
    try {
      await this.#request({ type: 'join', room, since });
    } finally {
      this.#collectors.delete(c);
    }
    const top = Math.max(this.#rooms.get(room) ?? 0, ...c.got.map((m) => m.seq));
    return { seq: top, messages: c.got.slice(0, limit) };
  }

  /**
   * A page of a reliable room's history, newest first: the kept messages
   * with seq < `before` (default: all), at most `limit`, read with a
   * `history` frame (the connection must be in the room). The next page
   * is `{before: <the last message's seq>}`.
   */
  async #historyPage(room, options) {
    const limit = options.limit ?? 100;
    const frame = { type: 'history', room, limit, reverse: true };
    if (options.before != null) {
      if (!(Number.isInteger(options.before) && options.before >= 0)) throw new WsgateError('bad_request', 'wsgate: before must be a non-negative integer');
      frame.before = options.before;
    }
    if (!(Number.isInteger(limit) && limit > 0)) throw new WsgateError('bad_request', 'wsgate: limit must be a positive integer');
    const r = await this.#request(frame);
    const res = r.result ?? {};
    return { seq: Number(res.seq) || 0, messages: (res.messages ?? []).map(toMessage) };
  }

  /**
   * A room's presence (rooms whose namespace has presence): the counts of
   * users and connections and the connections in it (the first page),
   * for a connection in the room.
   * @param {string} room
   * @returns {Promise<{users: number, connections: number, clients: {user: string, conn_id: string, node: string, device: string, info?: any}[], cursor?: string}>}
   */
  presence(room) {
    if (this.#link) return this.#link.call('presence', [room]);
    return this.#request({ type: 'presence', room: String(room) }).then((r) => r.result);
  }

  async #fetchHistory(room, since, limit) {
    if (typeof this.#fetch !== 'function') throw new WsgateError('bad_request', 'wsgate: no fetch implementation for history');
    const base = String(this.#o.api).replace(/\/+$/, '');
    const u = new URL(`${base}/api/v1/rooms/${encodeURIComponent(room)}/history`, hasWindow ? window.location.href : undefined);
    u.searchParams.set('since', String(since));
    u.searchParams.set('limit', String(limit));
    let res;
    try {
      res = await this.#fetch(u.toString(), { cache: 'no-store', headers: { ...(this.#o.apiHeaders ?? {}) } });
    } catch (err) {
      throw new WsgateError('unavailable', `wsgate: history: ${err?.message ?? err}`);
    }
    let body = null;
    try { body = await res.json(); } catch { /* not JSON */ }
    if (!res.ok || !body || !Array.isArray(body.messages)) {
      throw new WsgateError(body?.error?.code ?? 'history_failed', `wsgate: history answered ${res.status}${body?.error?.message ? ': ' + body.error.message : ''}`);
    }
    return { seq: Number(body.seq) || 0, messages: body.messages.map(toMessage) };
  }

  /**
   * Sends a new token in band (`refresh` frame, §15): its `exp` replaces the
   * connection's. Without an argument the token function of the options
   * is called. Resolves with the reply; the token is also the one of the
   * next connection. Emits `refresh`.
   * @param {string} [token]
   * @returns {Promise<{type: 'reply', id: string, ok: true}>}
   */
  refresh(token) {
    if (this.#link) return this.#link.call('refresh', [token]);
    const p = this.#refresh(token);
    p.catch(() => {});
    return p;
  }

  async #refresh(token) {
    try {
      if (token == null) {
        if (typeof this.#o.token !== 'function') throw new WsgateError('token_failed', 'wsgate: refresh() needs a token or options.token as a function');
        try {
          token = await this.#o.token();
        } catch (err) {
          throw new WsgateError('token_failed', `wsgate: the token function failed: ${err?.message ?? err}`);
        }
      }
      if (typeof token !== 'string' || token === '') throw new WsgateError('token_failed', 'wsgate: no token to refresh with');
      const r = await this.#request({ type: 'refresh', token });
      this.#token = token;
      this.#needToken = false;
      this.#stats.refreshes++;
      this.#emit('refresh', { ok: true, exp: claim(token, 'exp') });
      return r;
    } catch (err) {
      this.#emit('refresh', { ok: false, code: err?.code ?? 'refresh_failed', message: String(err?.message ?? err) });
      throw err;
    }
  }

  /**
   * Sends an event to the business (`send` frame, §13). Resolves with the
   * reply once the upstream accepted it.
   * @param {string} event
   * @param {*} [data]
   * @returns {Promise<{type: 'reply', id: string, ok: true}>}
   */
  send(event, data = null) {
    if (this.#link) return this.#link.call('send', [event, data]);
    return this.#request({ type: 'send', event: String(event ?? ''), data });
  }

  /**
   * A request to the business (`rpc` frame, §13): resolves with the reply's
   * `result`, rejects with its error.
   * @param {string} method
   * @param {*} [data]
   * @returns {Promise<any>}
   */
  rpc(method, data = null) {
    if (this.#link) return this.#link.call('rpc', [method, data]);
    return this.#request({ type: 'rpc', method: String(method ?? ''), data }).then((r) => r.result);
  }

  /**
   * Publishes a (non-reliable) message to a user or a room, if the token's
   * `pub` claim allows it. Resolves with the reply frame; rejects with a
   * {@link WsgateError} whose `code` is the server's (`forbidden`, ...).
   * @param {{type: 'user'|'room', id: string}|string} target an object or
   *   the short form `"room:lobby"`, `"user:bob"`
   * @param {string} event
   * @param {*} [data] any JSON value
   * @returns {Promise<{type: 'reply', id: string, ok: true}>}
   */
  publish(target, event, data = null) {
    if (this.#link) return this.#link.call('publish', [target, event, data]);
    let t = target;
    if (typeof t === 'string') {
      const i = t.indexOf(':');
      t = i > 0 ? { type: t.slice(0, i), id: t.slice(i + 1) } : { type: '', id: t };
    }
    if (!t || (t.type !== 'user' && t.type !== 'room') || !t.id) {
      return Promise.reject(new WsgateError('bad_request', 'wsgate: target must be {type: "user"|"room", id}'));
    }
    return this.#request({ type: 'publish', target: { type: t.type, id: String(t.id) }, event: String(event ?? ''), data });
  }

  /**
   * Sends a `ping` and resolves with the round-trip time in ms when the
   * `pong` comes back. As frames are handled in order, a ping is also a
   * barrier: acks sent before it have taken effect when it resolves.
   * @returns {Promise<number>}
   */
  ping() {
    if (this.#link) return this.#link.call('ping', []);
    if (!this.#opened || this.#ws?.readyState !== 1) {
      return Promise.reject(new WsgateError('not_connected', 'wsgate: not connected'));
    }
    let ts = Date.now();
    if (ts <= this.#lastPingTs) ts = this.#lastPingTs + 1;
    this.#lastPingTs = ts;
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => {
        this.#pings.delete(ts);
        reject(new WsgateError('timeout', 'wsgate: no pong within ' + this.#o.requestTimeout + ' ms'));
      }, this.#o.requestTimeout);
      this.#pings.set(ts, { resolve, reject, timer, sent: now() });
      this.#send({ type: 'ping', ts });
    });
  }

  /**
   * Sends an acknowledgement for everything received now, instead of
   * waiting for `ackEvery` / `ackDelay`.
   */
  flushAck() {
    if (this.#link) { this.#link.call('flushAck', []).catch(() => {}); return; }
    if (this.#opened && this.#ws) this.#flushAckOn(this.#ws);
  }

  #request(frame) {
    if (!this.#opened || this.#ws?.readyState !== 1) {
      // While (re)connecting a request waits for the welcome, up to
      // queueLimit of them; past it, or when the client is stopped, it is
      // refused at once.
      if (this.#running && this.#queue.length < this.#o.queueLimit) {
        return new Promise((resolve, reject) => this.#queue.push({ frame, resolve, reject }));
      }
      return Promise.reject(new WsgateError('not_connected', 'wsgate: not connected'));
    }
    return this.#sendRequest(frame);
  }

  /** Sends the queued requests in order while the connection is open. */
  #flushQueue() {
    while (this.#queue.length > 0 && this.#opened && this.#ws?.readyState === 1) {
      const q = this.#queue.shift();
      this.#sendRequest(q.frame).then(q.resolve, q.reject);
    }
  }

  #sendRequest(frame) {
    const id = 'r' + this.#nextId++;
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => {
        this.#pending.delete(id);
        reject(new WsgateError('timeout', `wsgate: no reply to ${frame.type} within ${this.#o.requestTimeout} ms`));
      }, this.#o.requestTimeout);
      this.#pending.set(id, { resolve, reject, timer });
      if (!this.#send({ ...frame, id })) {
        clearTimeout(timer);
        this.#pending.delete(id);
        reject(new WsgateError('not_connected', 'wsgate: not connected'));
      }
    });
  }

  // ---- connecting ----------------------------------------------------------

  async #dial() {
    const gen = ++this.#gen;
    this.#timer = null;
    let target = null;
    let retryAfter = 0;
    const redirect = this.#redirect;
    this.#redirect = null;
    try {
      if (redirect) {
        target = redirect.url;
      } else if (this.#o.allocator) {
        try {
          target = await this.#allocate();
        } catch (err) {
          if (gen !== this.#gen || !this.#running) return;
          retryAfter = err.retryAfter ?? 0;
          if (!this.#o.url) throw err;
          this.#emit('error', { code: err.code ?? 'allocator_failed', message: err.message });
        }
        if (gen !== this.#gen || !this.#running) return;
      }
      if (!target) target = this.#defaultUrl();
      this.#target = target;

      let token = null;
      if (typeof this.#o.token === 'function') {
        // A kept token that expires within 30 s would be refused or cut: renew it first.
        if (this.#needToken || this.#token == null || (claim(this.#token, 'exp') ?? Infinity) * 1000 - Date.now() < 30000) {
          try {
            token = await this.#o.token();
          } catch (err) {
            throw new WsgateError('token_failed', `wsgate: the token function failed: ${err?.message ?? err}`);
          }
          if (gen !== this.#gen || !this.#running) return;
          if (typeof token !== 'string' || token === '') throw new WsgateError('token_failed', 'wsgate: the token function returned no token');
          this.#token = token;
          this.#needToken = false;
        }
        token = this.#token;
      } else if (this.#token) {
        token = this.#token; // a string token replaced by refresh(token)
      } else if (typeof this.#o.token === 'string' && this.#o.token !== '') {
        token = this.#o.token;
      }

      const u = new URL(toWsUrl(target));
      if (!token && this.#o.user) u.searchParams.set('user', this.#o.user);
      if (this.#hasSeq) u.searchParams.set('since', String(this.#lastSeq));
      if (this.#device) u.searchParams.set('device', this.#device);
      for (const [room, seq] of this.#rooms) u.searchParams.append('room_since', `${room}:${seq}`);
      const kind = this.#transports[this.#tIndex];
      let ws;
      this.#sockOpened = false;
      if (kind === 'websocket') {
        const protocols = token ? [SUBPROTOCOL, 'bearer.' + token] : [SUBPROTOCOL];
        this.#currentUrl = u.toString();
        ws = new this.#WS(this.#currentUrl, protocols);
        ws.onopen = () => { if (gen === this.#gen) this.#sockOpened = true; };
      } else {
        if (typeof this.#fetch !== 'function') throw new WsgateError('connect_failed', `wsgate: no fetch implementation for the ${kind} transport`);
        this.#currentUrl = httpTransportUrl(u, kind);
        ws = new HttpStreamSocket(kind, this.#currentUrl, token, this.#fetch);
      }
      this.#transport = kind;
      this.#stats.connects++;
      this.#ws = ws;
      this.#opened = false;
      this.#gotMessage = false;
      this.#lastRecv = now();
      ws.onmessage = (e) => { if (gen === this.#gen) this.#onFrame(e.data); };
      ws.onclose = (e) => { if (gen === this.#gen) this.#ended(e.code || CloseCode.ABNORMAL, e.reason || '', e.wasClean === true); };
      ws.onerror = () => {}; // followed by close; the close carries the code
      this.#welcomeTimer = setTimeout(() => {
        if (gen === this.#gen && !this.#opened) this.#abandon(`no welcome within ${this.#o.handshakeTimeout} ms`);
      }, this.#o.handshakeTimeout);
    } catch (err) {
      if (gen !== this.#gen || !this.#running) return;
      const e = err instanceof WsgateError ? err : new WsgateError(err?.code ?? 'connect_failed', String(err?.message ?? err));
      this.#emit('error', { code: e.code, message: e.message });
      this.#ws = null;
      this.#retry(CloseCode.ABNORMAL, e.message, false, (err && err.retryAfter) || retryAfter);
    }
  }

  async #allocate() {
    if (typeof this.#fetch !== 'function') throw new WsgateError('allocator_failed', 'wsgate: no fetch implementation for the allocator');
    let base = String(this.#o.allocator).replace(/\/+$/, '');
    if (!/\/v1\/allocate$/.test(base)) base += '/v1/allocate';
    const u = new URL(base, hasWindow ? window.location.href : undefined);
    const user = this.#o.user || subject(typeof this.#o.token === 'string' ? this.#o.token : this.#token);
    if (user) u.searchParams.set('user', user);
    let res;
    try {
      res = await this.#fetch(u.toString(), {
        cache: 'no-store',
        signal: typeof AbortSignal !== 'undefined' && AbortSignal.timeout ? AbortSignal.timeout(this.#o.handshakeTimeout) : undefined,
      });
    } catch (err) {
      throw new WsgateError('allocator_failed', `wsgate: allocator ${u.origin} unreachable: ${err?.message ?? err}`);
    }
    let body = null;
    try { body = await res.json(); } catch { /* not JSON */ }
    if (!res.ok || !body || typeof body.url !== 'string') {
      const e = new WsgateError('allocator_failed', `wsgate: allocator answered ${res.status}${body?.error?.message ? ': ' + body.error.message : ''}`);
      const ra = Number(res.headers?.get?.('Retry-After'));
      if (ra > 0) e.retryAfter = Math.min(ra * 1000, this.#o.maxBackoff);
      throw e;
    }
    return body.url;
  }

  #defaultUrl() {
    if (this.#o.url) return this.#o.url;
    if (hasWindow && window.location) return '/ws';
    throw new WsgateError('bad_request', 'wsgate: give options.url or options.allocator');
  }

  // ---- frames --------------------------------------------------------------

  #onFrame(raw) {
    this.#lastRecv = now();
    if (typeof raw !== 'string') {
      this.#emit('error', { code: 'bad_frame', message: 'wsgate: binary frame on a JSON connection ignored' });
      return;
    }
    let f;
    try { f = JSON.parse(raw); } catch { f = null; }
    if (!f || typeof f !== 'object' || typeof f.type !== 'string') {
      this.#emit('error', { code: 'bad_frame', message: 'wsgate: server frame that is not a JSON object with a type ignored' });
      return;
    }
    if (!this.#opened && f.type !== 'welcome') return; // only the welcome comes first
    switch (f.type) {
      case 'welcome': return this.#onWelcome(f);
      case 'message': return this.#onMessage(f);
      case 'reply': return this.#onReply(f);
      case 'pong': return this.#onPong(f);
      case 'gap': return this.#onGap(f);
      case 'redirect':
        if (typeof f.url === 'string' && f.url) {
          this.#redirect = { url: f.url, after: Math.max(0, Number(f.retry_after_ms) || 0) };
        }
        this.#emit('redirect', { url: f.url, reason: f.reason, retry_after_ms: f.retry_after_ms });
        return;
      case 'error': return this.#onErrorFrame(f);
      case 'expiring': return this.#onExpiring(f);
      case 'joined': case 'left': // a room's presence changed (join_leave rooms)
        this.#emit(f.type, stripUndefined({ room: f.room, user: f.user, conn_id: f.conn_id, info: f.type === 'joined' ? f.info : undefined }));
        return;
      default: // unknown types are ignored (forward compatibility)
    }
  }

  #onWelcome(f) {
    if (this.#opened) return;
    clearTimeout(this.#welcomeTimer);
    this.#opened = true;
    this.#openedAt = now();
    this.#welcome = {
      conn_id: f.conn_id, node: f.node, user: f.user,
      ping_interval_ms: f.ping_interval_ms, inbox_seq: f.inbox_seq, transport: this.#transport,
    };
    this.#tFails = 0;
    this.#tTried = 0;
    if (f.device !== undefined) this.#welcome.device = f.device;
    if (f.rooms && typeof f.rooms === 'object') {
      this.#welcome.rooms = { ...f.rooms };
      // A room seen for the first time starts at its current seq (nothing is
      // replayed for it); a position above the room's seq belongs to a lost
      // history: the room's seq becomes the base (§12).
      for (const [room, top] of Object.entries(f.rooms)) {
        if (!Number.isInteger(top) || top < 0) continue;
        const pos = this.#rooms.get(room);
        if (pos == null || pos > top) this.#rooms.set(room, top);
      }
    }
    // The server never assigned a seq above inbox_seq: a larger lastSeq
    // belongs to a wiped inbox and would make every new message a "duplicate".
    if (Number.isInteger(f.inbox_seq) && this.#hasSeq && f.inbox_seq < this.#lastSeq) {
      this.#lastSeq = f.inbox_seq;
      this.#ackedSeq = Math.min(this.#ackedSeq, f.inbox_seq);
    }
    const interval = Math.max(1000, Number(f.ping_interval_ms) || 25000);
    this.#lastBeat = now();
    this.#beat = setInterval(() => this.#heartbeat(interval), Math.max(500, interval / 2));
    this.#flushQueue(); // before any listener can send: the queue keeps its order
    this.#setState('open', {});
    this.#emit('welcome', { ...this.#welcome });
    this.#emit('open', { transport: this.#transport, conn_id: f.conn_id, node: f.node });
    const waiters = this.#waiters.splice(0);
    for (const w of waiters) w.resolve({ ...this.#welcome });
    if (this.#lastSeq > this.#ackedSeq) this.#flushAckOn(this.#ws);
  }

  #onMessage(f) {
    this.#gotMessage = true;
    const seq = Number.isInteger(f.seq) && f.seq > 0 ? f.seq : 0;
    const room = f.target?.type === 'room' && typeof f.target.id === 'string' ? f.target.id : null;
    if (seq && room != null) {
      // A reliable room: its own seq space, deduplicated per room, never acknowledged.
      const m = toMessage(f);
      for (const c of this.#collectors) if (c.room === room && seq > c.since) c.got.push(m);
      if (seq <= (this.#rooms.get(room) ?? 0)) {
        this.#stats.duplicates++;
        return;
      }
      this.#rooms.set(room, seq);
      this.#stats.messages++;
      this.#emit('message', m);
      return;
    }
    if (seq && this.#hasSeq && seq <= this.#lastSeq) {
      this.#stats.duplicates++;
      return;
    }
    this.#stats.messages++;
    const m = toMessage(f);
    if (seq) {
      m.seq = seq;
      this.#lastSeq = seq;
      this.#hasSeq = true;
    }
    this.#emit('message', m);
    if (!seq) return;
    this.#unacked++;
    if (this.#unacked >= this.#o.ackEvery) {
      this.#flushAckOn(this.#ws);
    } else if (this.#ackTimer == null) {
      this.#ackTimer = setTimeout(() => {
        this.#ackTimer = null;
        if (this.#opened && this.#ws) this.#flushAckOn(this.#ws);
      }, this.#o.ackDelay);
    }
  }

  #flushAckOn(ws) {
    clearTimeout(this.#ackTimer);
    this.#ackTimer = null;
    if (!this.#hasSeq || this.#lastSeq <= this.#ackedSeq || ws.readyState !== 1) return;
    const seq = this.#lastSeq;
    try {
      ws.send(JSON.stringify({ type: 'ack', seq }));
    } catch {
      return; // sent again on the next connection
    }
    this.#ackedSeq = seq;
    this.#unacked = 0;
    this.#stats.acks++;
  }

  #onReply(f) {
    const p = this.#pending.get(String(f.id));
    if (!p) return;
    this.#pending.delete(String(f.id));
    clearTimeout(p.timer);
    if (f.ok) {
      p.resolve(f);
    } else {
      const code = f.error?.code ?? 'refused';
      p.reject(new WsgateError(code, f.error?.message || `wsgate: refused (${code})`));
    }
  }

  #onPong(f) {
    let ts = Number(f.ts);
    if (!this.#pings.has(ts) && this.#pings.size === 1) ts = this.#pings.keys().next().value; // a server that does not echo ts
    const p = this.#pings.get(ts);
    if (!p) return;
    this.#pings.delete(ts);
    clearTimeout(p.timer);
    p.resolve(now() - p.sent);
  }

  #onGap(f) {
    this.#stats.gaps++;
    this.#stats.missed += Number(f.missed) || 0;
    // from..to will never come: resume after them.
    if (f.target?.type === 'room' && typeof f.target.id === 'string') {
      const room = f.target.id;
      if (Number.isInteger(f.to) && f.to > (this.#rooms.get(room) ?? 0)) this.#rooms.set(room, f.to);
      this.#emit('gap', { from: f.from, to: f.to, missed: f.missed, target: { type: 'room', id: room } });
      return;
    }
    if (Number.isInteger(f.to) && f.to > this.#lastSeq) {
      this.#lastSeq = f.to;
      this.#hasSeq = true;
    }
    this.#emit('gap', { from: f.from, to: f.to, missed: f.missed });
  }

  #onExpiring(f) {
    this.#emit('expiring', { exp: f.exp });
    // With a token function, renew in band before exp; without one the
    // server closes with 4401 at exp and the client stops (a fixed token).
    if (typeof this.#o.token !== 'function' || this.#refreshing) return;
    this.#refreshing = this.#refresh().catch((err) => {
      this.#emit('error', { code: err?.code ?? 'refresh_failed', message: String(err?.message ?? err) });
    }).finally(() => { this.#refreshing = null; });
  }

  #onErrorFrame(f) {
    const err = { code: String(f.code ?? 'error'), message: String(f.message ?? '') };
    // Error frames carry no id: a single pending request is surely the one refused.
    if (this.#pending.size === 1) {
      const [id, p] = this.#pending.entries().next().value;
      this.#pending.delete(id);
      clearTimeout(p.timer);
      p.reject(new WsgateError(err.code, err.message || `wsgate: refused (${err.code})`));
      return;
    }
    this.#emit('error', err);
  }

  #send(frame) {
    const ws = this.#ws;
    if (!ws || ws.readyState !== 1) return false;
    try {
      ws.send(JSON.stringify(frame));
      return true;
    } catch {
      return false;
    }
  }

  #heartbeat(interval) {
    if (!this.#opened) return;
    const t = now();
    const late = t - this.#lastBeat > interval; // timers of a background tab are throttled
    this.#lastBeat = t;
    const idle = t - this.#lastRecv;
    if (late) {
      this.#send({ type: 'ping' }); // judge on a tick that came on time
    } else if (idle > interval + this.#o.pongTimeout) {
      this.#abandon(`no frame from the server for ${Math.round(idle)} ms`);
    } else if (idle >= interval / 2) {
      this.#send({ type: 'ping' });
    }
  }

  // ---- ending --------------------------------------------------------------

  /** Gives up on the current socket without waiting for its close event. */
  #abandon(reason) {
    const ws = this.#ws;
    this.#gen++; // its events are stale from now on
    try { ws?.close(); } catch { /* closing anyway */ }
    this.#ended(CloseCode.ABNORMAL, reason, false);
  }

  #clearConnTimers() {
    clearTimeout(this.#welcomeTimer);
    this.#welcomeTimer = null;
    clearInterval(this.#beat);
    this.#beat = null;
    clearTimeout(this.#ackTimer);
    this.#ackTimer = null;
  }

  #failPending(code, message, extra) {
    for (const [id, p] of this.#pending) {
      this.#pending.delete(id);
      clearTimeout(p.timer);
      p.reject(new WsgateError(code, message, extra));
    }
    for (const [ts, p] of this.#pings) {
      this.#pings.delete(ts);
      clearTimeout(p.timer);
      p.reject(new WsgateError(code, message, extra));
    }
  }

  /** The socket of the current generation ended with code. */
  #ended(code, reason, wasClean) {
    const wasOpen = this.#opened;
    const healthy = wasOpen && (this.#gotMessage || now() - this.#openedAt > STABLE_AFTER);
    this.#clearConnTimers();
    this.#ws = null;
    this.#opened = false;
    this.#failPending('connection_lost', `wsgate: connection closed (${code}${reason ? ': ' + reason : ''})`, { closeCode: code, closeReason: reason });
    if (!this.#running) return;
    if (healthy) {
      this.#attempt = 0;
      this.#quick = 0;
    }
    if (!wasOpen && typeof this.#o.token === 'function') {
      this.#needToken = true; // a refused handshake may be an expired token
    }
    const action = closeAction(code);
    const next = this.#nextTransport(wasOpen);
    if (next && action !== 'stop') {
      // Another transport is tried at once (contract §18), at the same
      // node; after a round of all of them the backoff applies.
      if (this.#target) this.#redirect = { url: this.#target, after: 0 };
      this.#emit('close', { code, reason, wasClean, reconnect: true, delay: 0, transport: next });
      this.#setState('reconnecting', { delay: 0, code, reason });
      clearTimeout(this.#timer);
      this.#timer = setTimeout(() => this.#dial(), 0);
      return;
    }
    if (action === 'refresh' && typeof this.#o.token !== 'function' && this.#o.token) {
      // A fixed token cannot be renewed: reconnecting would be refused.
      this.#emit('close', { code, reason, wasClean, reconnect: false });
      this.#emit('error', { code: 'token_expired', message: 'wsgate: the token expired (4401); give options.token as a function to renew it' });
      this.#stop('stopped', 'wsgate: the token expired', code, reason);
      return;
    }
    if (action === 'stop') {
      this.#emit('close', { code, reason, wasClean, reconnect: false });
      if (code === CloseCode.POLICY_VIOLATION || code === CloseCode.TOO_BIG) {
        this.#emit('error', { code: code === CloseCode.TOO_BIG ? 'too_big' : 'policy_violation', message: `wsgate: the server closed the connection with ${code}${reason ? ' (' + reason + ')' : ''}` });
      }
      this.#stop('stopped', `wsgate: the server closed the connection with ${code}${reason ? ' (' + reason + ')' : ''}`, code, reason);
      return;
    }
    this.#retry(code, reason, wasClean, 0, action);
  }

  /**
   * The transport of the next attempt after a close: the next one when a
   * WebSocket could not be opened or a transport closed twice before its
   * welcome (null: the same, after the backoff). A connection that opened
   * on a fallback sends the next attempt back to the first transport.
   * Returns the transport to try at once, or null.
   */
  #nextTransport(wasOpen) {
    const n = this.#transports.length;
    if (wasOpen) {
      this.#tIndex = 0;
      this.#tFails = 0;
      return null;
    }
    if (n < 2) return null;
    this.#tFails++;
    const kind = this.#transports[this.#tIndex];
    if (!(kind === 'websocket' && !this.#sockOpened) && this.#tFails < 2) return null;
    this.#tIndex = (this.#tIndex + 1) % n;
    this.#tFails = 0;
    if (++this.#tTried >= n) { // every transport failed: back off before the next round
      this.#tTried = 0;
      return null;
    }
    return this.#transports[this.#tIndex];
  }

  /** Schedules the next attempt after a close or a failed dial. */
  #retry(code, reason, wasClean, extraDelay = 0, action = 'backoff') {
    if (action === 'refresh') this.#needToken = true;
    let delay;
    if ((action === 'now' || action === 'refresh') && this.#quick < MAX_QUICK) {
      this.#quick++;
      delay = Math.floor(this.#random() * (QUICK_JITTER + 1));
    } else {
      delay = backoffDelay(this.#attempt++, this.#o.minBackoff, this.#o.maxBackoff, this.#random);
    }
    const redirect = action === 'now' ? this.#redirect : (this.#redirect = null);
    if (redirect) delay += Math.min(redirect.after, this.#o.maxBackoff);
    delay += extraDelay;
    this.#stats.reconnects++;
    this.#emit('close', { code, reason, wasClean, reconnect: true, delay });
    this.#setState('reconnecting', { delay, code, reason, url: redirect?.url });
    clearTimeout(this.#timer);
    this.#timer = setTimeout(() => this.#dial(), delay);
  }

  #online() {
    // The network came back: do not wait for the rest of the backoff.
    if (this.#running && this.#timer != null && !this.#ws) {
      clearTimeout(this.#timer);
      this.#timer = setTimeout(() => this.#dial(), Math.floor(this.#random() * (QUICK_JITTER + 1)));
    }
  }

  #stop(code, message, closeCode, closeReason) {
    const was = this.#running;
    this.#running = false;
    this.#gen++;
    clearTimeout(this.#timer);
    this.#timer = null;
    this.#clearConnTimers();
    this.#ws = null;
    this.#opened = false;
    this.#redirect = null;
    if (hasWindow) window.removeEventListener('online', this.#onOnline);
    const extra = { closeCode, closeReason };
    this.#failPending(code, message, extra);
    const waiters = this.#waiters.splice(0);
    for (const w of waiters) w.reject(new WsgateError(code, message, extra));
    for (const q of this.#queue.splice(0)) q.reject(new WsgateError(code, message, extra));
    if (was || this.#state !== 'closed') this.#setState('closed', { code: closeCode, reason: closeReason });
  }

  // ---- events --------------------------------------------------------------

  #setState(state, extra) {
    const previous = this.#state;
    this.#state = state;
    this.#emit('state', { state, previous, node: this.node, attempt: this.#attempt, ...stripUndefined(extra) });
  }

  #emit(type, detail) {
    try {
      this.dispatchEvent(new CustomEvent(type, { detail }));
      if (type === 'message' && typeof detail?.event === 'string') {
        this.#byEvent.dispatchEvent(new CustomEvent(detail.event, { detail }));
      }
    } catch (err) {
      // dispatchEvent does not throw for listener errors in browsers; other
      // runtimes might: a faulty handler must not break the client.
      setTimeout(() => { throw err; });
    }
  }
}

// ---- helpers ----------------------------------------------------------------

function now() {
  return typeof performance !== 'undefined' ? performance.now() : Date.now();
}

/** The message of a `message` frame, as events give it. */
function toMessage(f) {
  /** @type {Message} */
  const m = { id: f.id, event: f.event, data: f.data, ts: f.ts, target: f.target };
  if (Number.isInteger(f.seq) && f.seq > 0) m.seq = f.seq;
  if (f.from !== undefined) m.from = f.from;
  return m;
}

const DEVICE_KEY = 'wsgate.device';
const DEVICE_RE = /^[A-Za-z0-9_.-]{1,64}$/;

/**
 * The device id: the one given, else the one kept in storage (generated
 * and stored the first time), else a new one for this client's lifetime.
 */
function resolveDevice(given, storage) {
  if (given === null) return null;
  if (given !== undefined) {
    if (typeof given !== 'string' || !DEVICE_RE.test(given)) throw new TypeError('wsgate: device must match [A-Za-z0-9_.-]{1,64}');
    return given;
  }
  let st = storage;
  if (st === undefined) {
    try { st = globalThis.localStorage; } catch { st = undefined; } // blocked storage throws
  }
  try {
    const kept = st?.getItem(DEVICE_KEY);
    if (typeof kept === 'string' && DEVICE_RE.test(kept)) return kept;
  } catch { /* unreadable storage */ }
  const id = newDeviceId();
  try { st?.setItem(DEVICE_KEY, id); } catch { /* full or blocked: in memory only */ }
  return id;
}

function newDeviceId() {
  const b = new Uint8Array(12);
  if (globalThis.crypto?.getRandomValues) globalThis.crypto.getRandomValues(b);
  else for (let i = 0; i < b.length; i++) b[i] = Math.floor(Math.random() * 256);
  return 'd-' + [...b].map((x) => x.toString(16).padStart(2, '0')).join('');
}

function stripUndefined(o) {
  const out = {};
  for (const [k, v] of Object.entries(o)) if (v !== undefined) out[k] = v;
  return out;
}

/** Resolves a URL against the page and turns http(s) into ws(s). */
function toWsUrl(raw) {
  const base = hasWindow && window.location ? window.location.href : undefined;
  const u = new URL(raw, base);
  if (u.protocol === 'http:') u.protocol = 'ws:';
  else if (u.protocol === 'https:') u.protocol = 'wss:';
  if (u.protocol !== 'ws:' && u.protocol !== 'wss:') throw new WsgateError('bad_request', `wsgate: not a WebSocket URL: ${raw}`);
  return u.toString();
}

/** Checks the transports option (default: all three, WebSocket first). */
function checkTransports(given) {
  if (given == null) return [...TRANSPORTS];
  if (!Array.isArray(given) || given.length === 0) throw new TypeError('wsgate: transports must be a non-empty array');
  for (const t of given) {
    if (!TRANSPORTS.includes(t)) throw new TypeError(`wsgate: unknown transport ${JSON.stringify(t)} (websocket, sse, stream)`);
  }
  return [...new Set(given)];
}

/**
 * The http(s) URL of transport kind at the node of a WebSocket URL: `/ws`
 * becomes `/sse` or `/stream`, the query (since, room_since, device, user)
 * is kept.
 */
function httpTransportUrl(wsUrl, kind) {
  const u = new URL(wsUrl);
  u.protocol = u.protocol === 'wss:' ? 'https:' : 'http:';
  u.pathname = /\/ws$/.test(u.pathname) ? u.pathname.replace(/\/ws$/, '/' + kind) : u.pathname.replace(/\/?$/, '/' + kind);
  return u.toString();
}

/**
 * A session over SSE or HTTP streaming (contract §18), with the part of
 * WebSocket's interface the client uses: `readyState`, `send`, `close`,
 * `onmessage` and `onclose` (also as events). The stream is read with
 * fetch (EventSource cannot send the token as a header, and would
 * reconnect by itself: the client resumes with since and room_since on
 * every transport alike). Frames the client sends are posted in order to
 * `/v1/conn/{conn_id}` of the same node with the welcome's `session`, the
 * ones queued meanwhile together as one array. The server's last frame
 * `{"type":"close"}` gives the close code.
 */
class HttpStreamSocket extends EventTarget {
  /** 0 connecting, 1 open (the answer came), 3 closed, as WebSocket's. */
  readyState = 0;
  onmessage = null;
  onclose = null;
  onerror = null;
  #kind;
  #url;
  #fetch;
  #abort = new AbortController();
  #close = null; // the close frame, when it came
  #post = null; // {url, session} once the welcome came
  #queue = [];
  #posting = false;
  #ending = false;
  #done = false;

  /**
   * @param {'sse'|'stream'} kind
   * @param {string} url the http(s) URL of /sse or /stream, with the query
   * @param {string|null} token sent as `Authorization: Bearer`
   * @param {typeof fetch} fetchFn
   */
  constructor(kind, url, token, fetchFn) {
    super();
    this.#kind = kind;
    this.#url = url;
    this.#fetch = fetchFn;
    const headers = { Accept: kind === 'sse' ? 'text/event-stream' : 'application/x-ndjson' };
    if (token) headers.Authorization = 'Bearer ' + token;
    const init = { method: kind === 'sse' ? 'GET' : 'POST', headers, cache: 'no-store', signal: this.#abort.signal };
    Promise.resolve().then(() => this.#fetch(url, init)).then((res) => this.#read(res)).catch((err) => {
      this.#end(CloseCode.ABNORMAL, String(err?.message ?? err), false);
    });
  }

  async #read(res) {
    if (!res.ok || !res.body) {
      let reason = `HTTP ${res.status}`;
      try {
        const b = await res.json();
        if (b?.error?.code) reason += ` ${b.error.code}`;
      } catch { /* not JSON */ }
      this.#end(CloseCode.ABNORMAL, reason, false);
      return;
    }
    this.readyState = 1;
    const reader = res.body.getReader();
    const dec = new TextDecoder();
    let buf = '';
    let data = [];
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      buf += dec.decode(value, { stream: true });
      let i;
      while ((i = buf.indexOf('\n')) >= 0) {
        const line = buf.slice(0, i).replace(/\r$/, '');
        buf = buf.slice(i + 1);
        if (this.#kind === 'stream') {
          if (line !== '') this.#frame(line);
        } else if (line === '') {
          if (data.length) this.#frame(data.join('\n'));
          data = [];
        } else if (line.startsWith('data:')) {
          data.push(line.slice(line[5] === ' ' ? 6 : 5));
        } // comments (`:`), id: and other fields are not needed: the client resumes with seqs
      }
      if (this.#done) return;
    }
    const c = this.#close;
    this.#end(c ? Number(c.code) || CloseCode.ABNORMAL : CloseCode.ABNORMAL, c ? String(c.reason ?? '') : 'the stream ended', c != null);
  }

  #frame(text) {
    if (this.#done) return;
    let f = null;
    try { f = JSON.parse(text); } catch { /* passed on: the client reports it */ }
    if (f && f.type === 'close') {
      this.#close = f;
      return;
    }
    if (f && f.type === 'welcome' && typeof f.session === 'string' && typeof f.conn_id === 'string') {
      this.#post = { url: new URL('v1/conn/' + encodeURIComponent(f.conn_id), this.#url).toString(), session: f.session };
      this.#flush();
    }
    this.#dispatch('message', { data: text });
  }

  /** Queues one frame (a JSON string) to post; false once closed. */
  send(text) {
    if (this.readyState !== 1 || this.#ending) throw new Error('wsgate: the stream is not open');
    this.#queue.push(text);
    this.#flush();
  }

  async #flush() {
    if (this.#posting || !this.#post || this.#queue.length === 0) return;
    this.#posting = true;
    try {
      while (this.#queue.length > 0 && !this.#done) {
        const batch = this.#queue.splice(0);
        const body = batch.length === 1 ? batch[0] : '[' + batch.join(',') + ']';
        let res;
        try {
          res = await this.#fetch(this.#post.url, {
            method: 'POST', body, cache: 'no-store',
            headers: { 'Content-Type': 'application/json', Authorization: 'Bearer ' + this.#post.session },
          });
        } catch (err) {
          this.#end(CloseCode.ABNORMAL, `posting frames failed: ${err?.message ?? err}`, false);
          return;
        }
        if (res.status === 202) continue;
        if (res.status === 429) {
          // Over the message rate: those frames were not taken (their
          // requests time out); the connection stays.
          this.#dispatch('error', { status: 429 });
          continue;
        }
        this.#end(CloseCode.ABNORMAL, `posting frames answered ${res.status}`, false);
        return;
      }
    } finally {
      this.#posting = false;
      if (this.#ending && this.#queue.length === 0) this.#end(this.#ending.code, this.#ending.reason, true);
    }
  }

  /** Ends the stream (the server then closes the connection) once the frames queued are posted. */
  close(code = CloseCode.NORMAL, reason = '') {
    if (this.#done || this.#ending) return;
    this.#ending = { code, reason };
    if (!this.#posting || !this.#post) this.#end(code, reason, true);
  }

  #end(code, reason, wasClean) {
    if (this.#done) return;
    this.#done = true;
    this.readyState = 3;
    this.#abort.abort();
    this.#dispatch('close', { code, reason, wasClean });
  }

  #dispatch(type, detail) {
    const e = new Event(type);
    Object.assign(e, detail);
    this['on' + type]?.(e);
    this.dispatchEvent(e);
  }
}

/** The unverified `sub` claim of a JWT, for the allocator's query. */
function subject(token) {
  const sub = claim(token, 'sub');
  return typeof sub === 'string' ? sub : '';
}

/** An unverified claim of a JWT (undefined when unreadable). */
function claim(token, name) {
  if (typeof token !== 'string') return undefined;
  const part = token.split('.')[1];
  if (!part) return undefined;
  try {
    const json = atob(part.replace(/-/g, '+').replace(/_/g, '/').padEnd(Math.ceil(part.length / 4) * 4, '='));
    return JSON.parse(json)[name];
  } catch {
    return undefined;
  }
}

// ---- shared mode -------------------------------------------------------------

/** Events a SharedWorker forwards to its tabs. */
const EVENT_TYPES = ['state', 'welcome', 'open', 'message', 'gap', 'redirect', 'error', 'close', 'expiring', 'refresh', 'joined', 'left'];

const inWorker = typeof SharedWorkerGlobalScope === 'function' && globalThis instanceof SharedWorkerGlobalScope;

/** The options a tab hands its SharedWorker: serializable, URLs absolute. */
function sharedOptions(o, device) {
  const keys = ['user', 'format', 'minBackoff', 'maxBackoff', 'ackEvery', 'ackDelay', 'since', 'requestTimeout',
    'handshakeTimeout', 'pongTimeout', 'roomSince', 'apiHeaders', 'transports', 'queueLimit'];
  const out = {};
  for (const k of keys) if (o[k] !== undefined) out[k] = o[k];
  const base = hasWindow && window.location ? window.location.href : undefined;
  if (o.url || !o.allocator) out.url = toWsUrl(o.url || '/ws');
  if (o.allocator) out.allocator = new URL(String(o.allocator), base).toString();
  if (o.api) out.api = new URL(String(o.api), base).toString();
  out.device = device;
  if (typeof o.token === 'function') out.tokenFn = true;
  else if (o.token != null) out.token = o.token;
  return out;
}

/**
 * A tab's side of a shared connection: method calls go to the SharedWorker,
 * its events come back and are emitted by the tab's Client.
 */
class SharedLink {
  snap = { state: 'closed', node: null, connId: null, user: null, welcome: null, lastSeq: 0, url: null, rooms: {}, stats: {} };
  #port;
  #next = 1;
  /** @type {Map<number, {resolve: Function, reject: Function}>} */
  #pending = new Map();
  #o;
  #emit;

  constructor(client, o, device, emit) {
    this.#o = o;
    this.#emit = emit;
    const hello = { t: 'hello', options: sharedOptions(o, device) };
    const name = o.sharedName ?? `wsgate ${hello.options.url ?? ''} ${hello.options.allocator ?? ''} ${o.user ?? ''}`;
    const worker = new SharedWorker(o.sharedWorkerUrl ?? import.meta.url, { type: 'module', name });
    worker.onerror = () => emit('error', { code: 'shared_worker_failed', message: 'wsgate: the SharedWorker failed to start' });
    this.#port = worker.port;
    this.#port.onmessage = (e) => this.#onMessage(e.data);
    this.#port.postMessage(hello);
    if (hasWindow) {
      // The worker keeps the connection for the other tabs; this tab's
      // subscriptions end with it (and come back from the back/forward cache).
      window.addEventListener('pagehide', () => this.#port.postMessage({ t: 'bye' }));
      window.addEventListener('pageshow', (e) => { if (e.persisted) this.#port.postMessage(hello); });
    }
  }

  call(method, args) {
    return new Promise((resolve, reject) => {
      const id = this.#next++;
      this.#pending.set(id, { resolve, reject });
      try {
        this.#port.postMessage({ t: 'call', id, method, args });
      } catch (err) {
        this.#pending.delete(id);
        reject(new WsgateError('bad_request', `wsgate: ${method}: ${err?.message ?? err}`));
      }
    });
  }

  /** close() of a tab: it leaves the shared connection, which closes with the last tab. */
  async detach() {
    await this.call('close', []);
    const previous = this.snap.state;
    this.snap = { ...this.snap, state: 'closed', node: null, connId: null };
    if (previous !== 'closed') this.#emit('state', { state: 'closed', previous, node: null, attempt: 0 });
  }

  async #onMessage(d) {
    if (!d || typeof d !== 'object') return;
    switch (d.t) {
      case 'event':
        this.snap = d.snap;
        this.#emit(d.type, d.detail);
        return;
      case 'snap':
        this.snap = d.snap;
        return;
      case 'reply': {
        if (d.snap) this.snap = d.snap;
        const p = this.#pending.get(d.id);
        if (!p) return;
        this.#pending.delete(d.id);
        if (d.ok) p.resolve(d.value);
        else p.reject(new WsgateError(d.error.code, d.error.message, d.error));
        return;
      }
      case 'token': // the worker needs a token (connect, 4401, expiring) from a tab's function
        try {
          const token = await this.#o.token();
          this.#port.postMessage({ t: 'token', id: d.id, token });
        } catch (err) {
          this.#port.postMessage({ t: 'token', id: d.id, error: String(err?.message ?? err) });
        }
        return;
      default:
    }
  }
}

/**
 * The SharedWorker side: one Client for every tab that connects. Each tab
 * has its own rooms: a room message goes to the tabs that joined the room
 * (to every tab when none did: a membership made by the server API); every
 * other event goes to every tab. The connection, its acknowledgements and
 * positions live here, so they outlive the tab that opened them.
 */
function hostSharedWorker(scope) {
  /** @type {Client|null} */
  let client = null;
  /** @type {Map<MessagePort, {rooms: Set<string>, attached: boolean}>} */
  const ports = new Map();
  let nextAsk = 1;
  const asks = new Map();
  const post = (port, msg) => { try { port.postMessage(msg); } catch { /* a tab that went away */ } };
  const live = () => [...ports].filter(([, s]) => s.attached);

  function broadcast(type, detail) {
    const snap = client.snapshot();
    let targets = live();
    if (type === 'message' && detail?.target?.type === 'room') {
      const holders = targets.filter(([, s]) => s.rooms.has(detail.target.id));
      if (holders.length) targets = holders;
    }
    for (const [port] of targets) post(port, { t: 'event', type, detail, snap });
  }

  function ask(port) {
    return new Promise((resolve, reject) => {
      const id = nextAsk++;
      const timer = setTimeout(() => { asks.delete(id); reject(new Error('no answer')); }, 10000);
      asks.set(id, { resolve, reject, timer });
      post(port, { t: 'token', id });
    });
  }

  // The token function of the shared client: the newest tab first, then the others.
  async function askToken() {
    let last = null;
    for (const [port] of live().reverse()) {
      try { return await ask(port); } catch (err) { last = err; }
    }
    throw new Error(`no tab gave a token${last ? ': ' + last.message : ''}`);
  }

  function gone(port) {
    if (!ports.delete(port)) return;
    if (client && live().length === 0) client.close();
  }

  async function call(st, method, args) {
    switch (method) {
      case 'connect':
        st.attached = true;
        return client.connect();
      case 'close':
        st.attached = false;
        st.rooms.clear();
        if (live().length === 0) await client.close();
        return undefined;
      case 'join':
      case 'history': {
        const room = String(args[0]);
        const had = st.rooms.has(room);
        st.rooms.add(room); // before the request: the replay comes before the reply
        try {
          return await client[method](room, args[1] ?? {});
        } catch (err) {
          if (!had) st.rooms.delete(room);
          throw err;
        }
      }
      case 'leave': {
        const room = String(args[0]);
        st.rooms.delete(room);
        if (live().some(([, s]) => s.rooms.has(room))) return { type: 'reply', id: '', ok: true }; // another tab holds it
        return client.leave(room);
      }
      case 'publish': case 'ping': case 'refresh': case 'send': case 'rpc': case 'flushAck': case 'presence':
        return client[method](...args);
      default:
        throw new WsgateError('bad_request', `wsgate: unknown method ${method}`);
    }
  }

  async function onPortMessage(port, st, d) {
    if (!d || typeof d !== 'object') return;
    switch (d.t) {
      case 'hello':
        st.attached = true;
        if (!client) {
          const o = { ...d.options };
          if (o.tokenFn) o.token = askToken;
          delete o.tokenFn;
          client = new Client(o);
          for (const type of EVENT_TYPES) client.on(type, (detail) => broadcast(type, detail));
        }
        post(port, { t: 'snap', snap: client.snapshot() });
        return;
      case 'bye':
        gone(port);
        return;
      case 'token': {
        const a = asks.get(d.id);
        if (!a) return;
        asks.delete(d.id);
        clearTimeout(a.timer);
        if (typeof d.token === 'string' && d.token) a.resolve(d.token);
        else a.reject(new Error(d.error || 'no token'));
        return;
      }
      case 'call':
        try {
          if (!client) throw new WsgateError('not_connected', 'wsgate: the shared connection is not set up');
          const value = await call(st, d.method, d.args ?? []);
          post(port, { t: 'reply', id: d.id, ok: true, value, snap: client.snapshot() });
        } catch (err) {
          post(port, { t: 'reply', id: d.id, ok: false, error: { code: err?.code ?? 'error', message: String(err?.message ?? err), closeCode: err?.closeCode, closeReason: err?.closeReason } });
        }
        return;
      default:
    }
  }

  scope.addEventListener('connect', (e) => {
    const port = e.ports[0];
    const st = { rooms: new Set(), attached: true };
    ports.set(port, st);
    port.onmessage = (ev) => onPortMessage(port, st, ev.data);
    port.addEventListener('close', () => gone(port)); // where MessagePort has a close event
  });
}

if (inWorker) hostSharedWorker(globalThis);
