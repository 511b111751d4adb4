// Type declarations of @wsgate/client (wsgate.js), written by hand.

/** Version of this client. */
export const VERSION: string;
/** The WebSocket subprotocol of wsgate; always offered. */
export const SUBPROTOCOL: 'wsgate.v1';

/** Close codes of the wsgate protocol. */
export const CloseCode: Readonly<{
  NORMAL: 1000;
  GOING_AWAY: 1001;
  ABNORMAL: 1006;
  POLICY_VIOLATION: 1008;
  TOO_BIG: 1009;
  DRAINING: 4001;
  DISCONNECTED: 4003;
  SLOW_CONSUMER: 4008;
  REPLACED: 4009;
  TOKEN_EXPIRED: 4401;
  RATE_LIMITED: 4429;
}>;

/** What the client does after a close. */
export type CloseAction = 'stop' | 'backoff' | 'now' | 'refresh';
/** Maps a close code to the client's action. */
export function closeAction(code: number): CloseAction;
/** Full-jitter delay before retry number `attempt`: uniform in [0, min(maxMs, minMs * 2^attempt)]. */
export function backoffDelay(attempt: number, minMs: number, maxMs: number, random?: () => number): number;

/** An error of a request or of the connection. */
export class WsgateError extends Error {
  constructor(code: string, message: string, extra?: { closeCode?: number; closeReason?: string });
  readonly name: 'WsgateError';
  /** The server's error code (`forbidden`, `unauthorized`, ...) or the client's own (`not_connected`, `connection_lost`, `timeout`, `closed`, `stopped`, `token_failed`, ...). */
  code: string;
  closeCode?: number;
  closeReason?: string;
}

export type State = 'connecting' | 'open' | 'reconnecting' | 'closed';
export type TargetType = 'user' | 'room' | 'broadcast';
export interface Target { type: TargetType; id: string }
/** A publish target: an object or the short form `room:lobby`, `user:bob`. */
export type PublishTarget = { type: 'user' | 'room'; id: string } | `user:${string}` | `room:${string}`;

/** A token, or a function returning one (called for connects, after 4401 and on `expiring`). */
export type TokenSource = string | (() => string | Promise<string>);

export interface ClientOptions {
  /** WebSocket URL of a node (relative and http(s) URLs are resolved against the page). Default `/ws`. */
  url?: string;
  /** Base URL of an allocator; each connection asks it for a node. */
  allocator?: string;
  /** User id for insecure servers (`?user=`) and the allocator's query. */
  user?: string;
  token?: TokenSource;
  /** Wire format; only `json`. */
  format?: 'json';
  /** First backoff ceiling in ms (1000). */
  minBackoff?: number;
  /** Largest backoff ceiling in ms (30000). */
  maxBackoff?: number;
  /** Acknowledge after this many reliable user messages (20). */
  ackEvery?: number;
  /** Or this many ms after the first unacknowledged one (200). */
  ackDelay?: number;
  /** Resume point of the inbox for the first connection. */
  since?: number;
  /** Resume points of reliable rooms for the first connection (room to seq). */
  roomSince?: Record<string, number>;
  /** ms to wait for a reply (10000). */
  requestTimeout?: number;
  /**
   * Requests (`join`, `leave`, `publish`, `send`, `rpc`) made while the client connects or
   * reconnects wait for the next welcome and are sent then, in order, up to this many (100);
   * past it, or with 0, they reject at once with `not_connected`.
   */
  queueLimit?: number;
  /** ms for the allocator, the upgrade and the welcome together (10000). */
  handshakeTimeout?: number;
  /** ms of silence past the ping interval after which a connection is dead (10000). */
  pongTimeout?: number;
  /** Device id sent as `device` (`[A-Za-z0-9_.-]{1,64}`); default: generated once and kept in localStorage; `null`: none. */
  device?: string | null;
  /** Where the device id is kept (default `localStorage`). */
  storage?: Pick<Storage, 'getItem' | 'setItem'>;
  /** Base URL of a server API the client may call: history() reads it. */
  api?: string;
  /** Headers of the API calls (e.g. an Authorization your proxy checks). */
  apiHeaders?: Record<string, string>;
  /** Share one WebSocket between this origin's tabs through a SharedWorker. */
  shared?: boolean;
  /** Module the SharedWorker runs (default: this module; same origin as the page). */
  sharedWorkerUrl?: string | URL;
  /** SharedWorker name: tabs with one name share one connection. */
  sharedName?: string;
  /**
   * Transports to try, in order (default `['websocket', 'sse', 'stream']`):
   * the next is tried at once when a WebSocket cannot be opened or a
   * transport closes twice before a welcome (contract §18).
   */
  transports?: Transport[];
  /** WebSocket constructor (runtimes without a global one, tests). */
  WebSocket?: unknown;
  /** fetch function (tests). */
  fetch?: typeof fetch;
  /** Random source in [0, 1) (tests). */
  random?: () => number;
}

/** How the session is carried: WebSocket, Server-Sent Events or HTTP streaming. */
export type Transport = 'websocket' | 'sse' | 'stream';

export interface Message<T = unknown> {
  id: string;
  event: string;
  data: T;
  /** Publish time, Unix ms. */
  ts: number;
  target: Target;
  /** Reliable messages only: per user for user targets, per room for reliable rooms. */
  seq?: number;
  /** The user whose `publish` frame sent it (set by the server). */
  from?: string;
}

export interface Welcome {
  conn_id: string;
  node: string;
  user: string;
  ping_interval_ms: number;
  inbox_seq: number;
  device?: string;
  /** Each reliable room the user is a member of, with its current seq. */
  rooms?: Record<string, number>;
  /** The transport the connection opened on. */
  transport: Transport;
}

export interface OpenDetail { transport: Transport; conn_id: string; node: string }

export interface StateDetail {
  state: State;
  previous: State;
  node: string | null;
  attempt: number;
  delay?: number;
  code?: number;
  reason?: string;
  url?: string;
}
export interface GapDetail { from: number; to: number; missed: number; target?: { type: 'room'; id: string } }
export interface RedirectDetail { url: string; reason: string; retry_after_ms: number }
export interface ErrorDetail { code: string; message: string }
export interface CloseDetail {
  code: number; reason: string; wasClean: boolean; reconnect: boolean; delay?: number;
  /** Set when the next attempt moves to this transport (at once). */
  transport?: Transport;
}
export interface ExpiringDetail { exp: number }
export interface RefreshDetail { ok: boolean; exp?: number; code?: string; message?: string }

/** A connection entered a room's presence (rooms with join_leave). */
export interface JoinedDetail { room: string; user: string; conn_id: string; info?: unknown }
/** A connection left a room's presence; never before its joined. */
export interface LeftDetail { room: string; user: string; conn_id: string }
export interface PresenceClient { user: string; conn_id: string; node: string; device: string; info?: unknown }
export interface RoomPresence { users: number; connections: number; clients: PresenceClient[]; cursor?: string }
export interface JoinOptions {
  /** The room's position: what came after it is replayed first (reliable rooms). */
  since?: number;
  /** A room token (a JWT with `sub` and `room`) that allows this join. */
  token?: string;
  /** Passed to the room's join proxy. */
  data?: unknown;
}
export interface HistoryOptions {
  /** Oldest first after this seq (default 0). */
  since?: number;
  /** Newest first below this seq (a page; the next page is before the last seq). */
  before?: number;
  /** Newest first (with or without before). */
  reverse?: boolean;
  limit?: number;
}

export interface ClientEvents {
  state: StateDetail;
  welcome: Welcome;
  open: OpenDetail;
  message: Message;
  gap: GapDetail;
  redirect: RedirectDetail;
  error: ErrorDetail;
  close: CloseDetail;
  expiring: ExpiringDetail;
  refresh: RefreshDetail;
  joined: JoinedDetail;
  left: LeftDetail;
}

export interface Reply { type: 'reply'; id: string; ok: true; seq?: number }
export interface History { seq: number; messages: Message[] }

export interface Stats {
  connects: number;
  reconnects: number;
  messages: number;
  duplicates: number;
  acks: number;
  gaps: number;
  missed: number;
  refreshes: number;
  lastSeq: number;
  ackedSeq: number;
}

export class Client extends EventTarget {
  constructor(options?: ClientOptions);
  readonly state: State;
  readonly node: string | null;
  readonly connId: string | null;
  readonly user: string | null;
  readonly welcome: Welcome | null;
  /** Highest reliable user seq received. */
  readonly lastSeq: number;
  readonly url: string | null;
  readonly device: string | null;
  /** Positions of the reliable rooms (room to seq). */
  readonly rooms: Record<string, number>;
  /** True when this tab uses a SharedWorker's connection. */
  readonly shared: boolean;
  /** The transport of the open connection or of the attempt under way. */
  readonly transport: Transport | null;
  readonly stats: Stats;

  /** Adds a listener of the event's detail; returns its remover. */
  on<K extends keyof ClientEvents>(type: K, fn: (detail: ClientEvents[K]) => void): () => void;
  /**
   * Adds a listener of the messages whose `event` is `event` (any name but the client's own
   * events above), called after the `message` listeners; returns its remover.
   */
  on<T = unknown, E extends string = string>(event: E extends keyof ClientEvents ? never : E, fn: (message: Message<T>) => void): () => void;
  connect(): Promise<Welcome>;
  /** Closes (in shared mode: detaches this tab; the socket closes with the last tab). */
  close(): Promise<void>;
  join(room: string, options?: JoinOptions): Promise<Reply>;
  leave(room: string): Promise<Reply>;
  history(room: string, options?: HistoryOptions): Promise<History>;
  /** The room's presence (its first page), for a connection in the room. */
  presence(room: string): Promise<RoomPresence>;
  publish(target: PublishTarget, event: string, data?: unknown): Promise<Reply>;
  send(event: string, data?: unknown): Promise<Reply>;
  rpc<R = unknown>(method: string, data?: unknown): Promise<R>;
  refresh(token?: string): Promise<Reply>;
  ping(): Promise<number>;
  flushAck(): void;
}
