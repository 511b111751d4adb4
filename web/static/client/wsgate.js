/**
 * wsgate.js: the browser client of the wsgate WebSocket gateway.
 *
 * One ES module, no dependencies. It connects (through the allocator when
 * one is given), reconnects with exponential backoff and full jitter,
 * resumes reliable messages with `since`, acknowledges them in batches,
 * drops duplicates, follows `redirect` frames of draining nodes and honours
 * every close code of the wsgate protocol (contract §3, §4). It keeps its
 * state in memory only: nothing is written to any storage.
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
export const VERSION = '1.0.0';

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
 */

/**
 * A pushed message (contract §4.1).
 * @typedef {object} Message
 * @property {string} id
 * @property {string} event
 * @property {*} data
 * @property {number} ts publish time, Unix ms
 * @property {{type: string, id: string}} target
 * @property {number} [seq] present exactly for reliable user messages
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

const DEFAULTS = Object.freeze({
  format: 'json',
  minBackoff: 1000,
  maxBackoff: 30000,
  ackEvery: 20,
  ackDelay: 200,
  requestTimeout: 10000,
  handshakeTimeout: 10000,
  pongTimeout: 10000,
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
 * | `welcome` | the welcome frame: `{conn_id, node, user, ping_interval_ms, inbox_seq}` |
 * | `message` | {@link Message} |
 * | `gap` | `{from, to, missed}`: reliable messages that will never come |
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
  /** @type {WebSocket|null} */
  #ws = null;
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

  #nextId = 1;
  /** @type {Map<string, {resolve: Function, reject: Function, timer: any}>} */
  #pending = new Map();
  /** @type {Map<number, {resolve: Function, reject: Function, timer: any, sent: number}>} */
  #pings = new Map();
  #lastPingTs = 0;
  /** @type {Array<{resolve: Function, reject: Function}>} */
  #waiters = [];
  #welcome = null;
  #onOnline = () => this.#online();

  #stats = { connects: 0, reconnects: 0, messages: 0, duplicates: 0, acks: 0, gaps: 0, missed: 0 };

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
    this.#o = o;
  }

  // ---- public state -------------------------------------------------------

  /** The connection state. @type {State} */
  get state() { return this.#state; }
  /** Node serving the open connection, else null. @type {string|null} */
  get node() { return this.#opened ? this.#welcome?.node ?? null : null; }
  /** Connection id of the open connection, else null. @type {string|null} */
  get connId() { return this.#opened ? this.#welcome?.conn_id ?? null : null; }
  /** User id the server gave the last connection. @type {string|null} */
  get user() { return this.#welcome?.user ?? this.#o.user ?? null; }
  /** The last welcome frame, or null. */
  get welcome() { return this.#welcome ? { ...this.#welcome } : null; }
  /** Highest reliable seq received (0 when none). @type {number} */
  get lastSeq() { return this.#lastSeq; }
  /** URL of the current or last connection. @type {string|null} */
  get url() { return this.#currentUrl; }
  /** Counters since construction (a copy). */
  get stats() { return { ...this.#stats, lastSeq: this.#lastSeq, ackedSeq: this.#ackedSeq }; }

  /**
   * Adds a listener that receives the event's detail. Returns a function
   * that removes it.
   * @param {'state'|'welcome'|'message'|'gap'|'redirect'|'error'|'close'} type
   * @param {(detail: any) => void} fn
   * @returns {() => void}
   */
  on(type, fn) {
    const h = (e) => fn(e.detail);
    this.addEventListener(type, h);
    return () => this.removeEventListener(type, h);
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
   * the room, contract §4.2). Resolves with the reply frame.
   * @param {string} room
   * @returns {Promise<{type: 'reply', id: string, ok: true}>}
   */
  join(room) {
    return this.#request({ type: 'join', room: String(room) });
  }

  /**
   * Leaves a room. Resolves with the reply frame.
   * @param {string} room
   * @returns {Promise<{type: 'reply', id: string, ok: true}>}
   */
  leave(room) {
    return this.#request({ type: 'leave', room: String(room) });
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
    if (this.#opened && this.#ws) this.#flushAckOn(this.#ws);
  }

  #request(frame) {
    if (!this.#opened || this.#ws?.readyState !== 1) {
      return Promise.reject(new WsgateError('not_connected', 'wsgate: not connected'));
    }
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

      let token = null;
      if (typeof this.#o.token === 'function') {
        if (this.#needToken || this.#token == null) {
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
      } else if (typeof this.#o.token === 'string' && this.#o.token !== '') {
        token = this.#o.token;
      }

      const u = new URL(toWsUrl(target));
      if (!token && this.#o.user) u.searchParams.set('user', this.#o.user);
      if (this.#hasSeq) u.searchParams.set('since', String(this.#lastSeq));
      const protocols = token ? [SUBPROTOCOL, 'bearer.' + token] : [SUBPROTOCOL];
      this.#currentUrl = u.toString();
      this.#stats.connects++;
      const ws = new this.#WS(this.#currentUrl, protocols);
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
      ping_interval_ms: f.ping_interval_ms, inbox_seq: f.inbox_seq,
    };
    // The server never assigned a seq above inbox_seq: a larger lastSeq
    // belongs to a wiped inbox and would make every new message a "duplicate".
    if (Number.isInteger(f.inbox_seq) && this.#hasSeq && f.inbox_seq < this.#lastSeq) {
      this.#lastSeq = f.inbox_seq;
      this.#ackedSeq = Math.min(this.#ackedSeq, f.inbox_seq);
    }
    const interval = Math.max(1000, Number(f.ping_interval_ms) || 25000);
    this.#lastBeat = now();
    this.#beat = setInterval(() => this.#heartbeat(interval), Math.max(500, interval / 2));
    this.#setState('open', {});
    this.#emit('welcome', { ...this.#welcome });
    const waiters = this.#waiters.splice(0);
    for (const w of waiters) w.resolve({ ...this.#welcome });
    if (this.#lastSeq > this.#ackedSeq) this.#flushAckOn(this.#ws);
  }

  #onMessage(f) {
    this.#gotMessage = true;
    const seq = Number.isInteger(f.seq) && f.seq > 0 ? f.seq : 0;
    if (seq && this.#hasSeq && seq <= this.#lastSeq) {
      this.#stats.duplicates++;
      return;
    }
    this.#stats.messages++;
    /** @type {Message} */
    const m = { id: f.id, event: f.event, data: f.data, ts: f.ts, target: f.target };
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
    if (Number.isInteger(f.to) && f.to > this.#lastSeq) {
      this.#lastSeq = f.to;
      this.#hasSeq = true;
    }
    this.#emit('gap', { from: f.from, to: f.to, missed: f.missed });
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

/** The unverified `sub` claim of a JWT, for the allocator's query. */
function subject(token) {
  if (typeof token !== 'string') return '';
  const part = token.split('.')[1];
  if (!part) return '';
  try {
    const json = atob(part.replace(/-/g, '+').replace(/_/g, '/').padEnd(Math.ceil(part.length / 4) * 4, '='));
    const sub = JSON.parse(json).sub;
    return typeof sub === 'string' ? sub : '';
  } catch {
    return '';
  }
}
