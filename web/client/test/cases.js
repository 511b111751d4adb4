// Unit tests of wsgate.js against a fake WebSocket. The same cases run in
// Node (unit.test.js, `node --test`) and in Chromium (web/client_test.go
// through web/testdata/client-test.html).

import { Client, CloseCode, WsgateError, backoffDelay, closeAction } from '../wsgate.js';

// ---- a fake WebSocket, driven by the tests as the server ------------------------

function fakeSocket() {
  class FakeWS extends EventTarget {
    static instances = [];
    constructor(url, protocols) {
      super();
      this.url = url;
      this.protocols = protocols;
      this.readyState = 0;
      this.sent = [];
      this.closedWith = null;
      FakeWS.instances.push(this);
    }
    send(s) {
      if (this.readyState !== 1) throw new Error('InvalidStateError: not open');
      this.sent.push(JSON.parse(s));
    }
    close(code = 1005, reason = '') {
      if (this.readyState >= 2) return;
      this.closedWith = { code, reason };
      this.readyState = 2;
      setTimeout(() => this.finish(code, reason, true), 0);
    }
    // Server side.
    accept(welcome = {}) {
      this.readyState = 1;
      this.onopen?.(new Event('open'));
      this.push({ type: 'welcome', conn_id: `c${FakeWS.instances.indexOf(this)}`, node: 'n1', user: 'alice', ping_interval_ms: 25000, inbox_seq: 0, ...welcome });
    }
    push(frame) {
      this.onmessage?.({ data: typeof frame === 'string' ? frame : JSON.stringify(frame) });
    }
    drop(code = 1006, reason = '') {
      this.finish(code, reason, code !== 1006);
    }
    finish(code, reason, wasClean) {
      if (this.readyState === 3) return;
      this.readyState = 3;
      const ev = { code, reason, wasClean };
      this.onclose?.(ev);
      this.dispatchEvent(Object.assign(new Event('close'), ev));
    }
    frames(type) { return this.sent.filter((f) => f.type === type); }
    get query() { return new URL(this.url).searchParams; }
  }
  return FakeWS;
}

// ---- a fake node for SSE and HTTP streaming (contract §18), as fetch -------------

function fakeHttp() {
  const enc = new TextEncoder();
  const h = {
    streams: [], // the GET /sse and POST /stream requests, with push/end as the server
    posts: [], // the POST /v1/conn/{id} requests: {url, auth, body}
    postStatus: 202,
    refuse: 0, // answer streams with this status and a JSON error when set
    async stream(i) {
      await waitFor(() => h.streams.length > i, `stream #${i}`);
      return h.streams[i];
    },
    fetch: async (url, init = {}) => {
      const u = new URL(url);
      if (u.pathname.startsWith('/v1/conn/')) {
        h.posts.push({ url, auth: init.headers?.Authorization, body: JSON.parse(init.body) });
        return new Response(null, { status: h.postStatus });
      }
      const kind = u.pathname.endsWith('/sse') ? 'sse' : 'stream';
      let ctrl;
      const body = new ReadableStream({ start(c) { ctrl = c; } });
      const st = {
        url, kind, method: init.method, auth: init.headers?.Authorization, query: u.searchParams, aborted: false,
        push(frame, id) {
          const j = typeof frame === 'string' ? frame : JSON.stringify(frame);
          ctrl.enqueue(enc.encode(kind === 'sse' ? `data: ${j}\n${id ? `id: ${id}\n` : ''}\n` : j + '\n'));
        },
        comment() { ctrl.enqueue(enc.encode(':\n\n')); },
        end() { try { ctrl.close(); } catch { /* aborted */ } },
        welcome(extra = {}) {
          st.push({ type: 'welcome', conn_id: `c${h.streams.indexOf(st)}`, node: 'n1', user: 'alice', ping_interval_ms: 25000, inbox_seq: 0, session: 'sess' + h.streams.indexOf(st), transport: kind, ...extra });
        },
      };
      init.signal?.addEventListener('abort', () => {
        st.aborted = true;
        try { ctrl.error(new Error('aborted')); } catch { /* closed */ }
      });
      h.streams.push(st);
      if (h.refuse) return new Response(JSON.stringify({ error: { code: 'unavailable', message: 'x' } }), { status: h.refuse });
      return new Response(body, { status: 200, headers: { 'Content-Type': kind === 'sse' ? 'text/event-stream' : 'application/x-ndjson' } });
    },
  };
  return h;
}

// ---- a tiny runner -------------------------------------------------------------

/** The cases, in order: {name, fn}. */
export const tests = [];
const test = (name, fn) => tests.push({ name, fn });

function eq(got, want, what) {
  const g = JSON.stringify(got);
  const w = JSON.stringify(want);
  if (g !== w) throw new Error(`${what}: got ${g}, want ${w}`);
}
function ok(cond, what) {
  if (!cond) throw new Error(`${what}: false`);
}
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
async function waitFor(cond, what, ms = 2000) {
  const end = performance.now() + ms;
  while (!cond()) {
    if (performance.now() > end) throw new Error(`timed out waiting for ${what}`);
    await sleep(2);
  }
}
async function rejects(p, code, what) {
  try {
    await p;
  } catch (err) {
    ok(err instanceof WsgateError, `${what}: a WsgateError (got ${err})`);
    eq(err.code, code, `${what}: error code`);
    return err;
  }
  throw new Error(`${what}: resolved, want a rejection with ${code}`);
}

/** A client on a fresh fake socket class, with fast backoff by default. */
function setup(opts = {}) {
  const WS = fakeSocket();
  // WebSocket only unless a case names the transports: a refused fake
  // socket would otherwise fall back to SSE (cases below).
  const client = new Client({ url: 'ws://gw.test/ws', user: 'alice', device: null, WebSocket: WS, minBackoff: 10, maxBackoff: 40, random: () => 0.5, transports: ['websocket'], ...opts });
  const events = { state: [], message: [], close: [], error: [], gap: [], welcome: [], open: [], redirect: [], expiring: [], refresh: [] };
  for (const type of Object.keys(events)) client.on(type, (d) => events[type].push(d));
  const socket = async (i) => {
    await waitFor(() => WS.instances.length > i, `socket #${i}`);
    return WS.instances[i];
  };
  return { WS, client, events, socket };
}

/** Connects and accepts the first socket. */
async function open(opts, welcome) {
  const t = setup(opts);
  const p = t.client.connect();
  t.ws = await t.socket(0);
  t.ws.accept(welcome);
  await p;
  return t;
}

const message = (seq, extra = {}) => ({ type: 'message', id: `m${seq}`, event: 'e', data: { n: seq }, ts: 1, target: { type: 'user', id: 'alice' }, ...(seq ? { seq } : {}), ...extra });

// ---- pure functions ----------------------------------------------------------

test('closeAction follows the close code table (contract §4.4)', () => {
  const codes = [1000, 1001, 1006, 1008, 1009, 4001, 4003, 4008, 4009, 4401, 4429, 4999];
  eq(codes.map(closeAction), ['stop', 'backoff', 'backoff', 'stop', 'stop', 'now', 'stop', 'backoff', 'stop', 'refresh', 'backoff', 'backoff'], 'actions');
  eq(CloseCode.DRAINING, 4001, 'CloseCode.DRAINING');
});

test('backoffDelay: full jitter from 1 s doubling to 30 s', () => {
  const caps = [0, 1, 2, 3, 4, 5, 6, 40].map((a) => backoffDelay(a, 1000, 30000, () => 0.9999999));
  eq(caps, [1000, 2000, 4000, 8000, 16000, 30000, 30000, 30000], 'ceilings');
  eq([0, 3, 9].map((a) => backoffDelay(a, 1000, 30000, () => 0)), [0, 0, 0], 'floor is 0');
  let sum = 0;
  for (let i = 0; i < 2000; i++) {
    const d = backoffDelay(3, 1000, 30000);
    ok(d >= 0 && d <= 8000 && Number.isInteger(d), `delay ${d} in [0, 8000]`);
    sum += d;
  }
  const mean = sum / 2000;
  ok(mean > 3400 && mean < 4600, `mean ${mean} near 4000 (uniform over the window)`);
});

test('options are validated', () => {
  let threw = false;
  try { new Client({ format: 'msgpack', WebSocket: fakeSocket() }); } catch (e) { threw = e instanceof TypeError; }
  ok(threw, 'format msgpack refused');
  threw = false;
  try { new Client({ minBackoff: 100, maxBackoff: 10, WebSocket: fakeSocket() }); } catch (e) { threw = e instanceof TypeError; }
  ok(threw, 'maxBackoff < minBackoff refused');
});

// ---- handshake ---------------------------------------------------------------

test('insecure user goes in the query, wsgate.v1 is offered, no since at first', async () => {
  const t = setup();
  const p = t.client.connect();
  eq(t.client.state, 'connecting', 'state while connecting');
  const ws = await t.socket(0);
  eq(ws.query.get('user'), 'alice', 'user');
  eq(ws.query.has('since'), false, 'since');
  eq(ws.query.has('token'), false, 'token');
  eq(ws.protocols, ['wsgate.v1'], 'protocols');
  ws.accept({ node: 'n7' });
  const w = await p;
  eq(w.node, 'n7', 'welcome node');
  eq([t.client.state, t.client.node], ['open', 'n7'], 'state and node');
  eq(t.events.state.map((s) => s.state), ['connecting', 'open'], 'state events');
  eq(t.events.state[1].node, 'n7', 'state detail node');
  await t.client.close();
  eq(ws.closedWith?.code, 1000, 'close code');
  eq(t.client.state, 'closed', 'state after close');
});

test('a token goes as the bearer.<jwt> subprotocol, never in the URL', async () => {
  const t = setup({ token: 'aaa.bbb.ccc' });
  t.client.connect();
  const ws = await t.socket(0);
  eq(ws.protocols, ['wsgate.v1', 'bearer.aaa.bbb.ccc'], 'protocols');
  eq([ws.query.has('user'), ws.query.has('token')], [false, false], 'no user, no token in the query');
  await t.client.close();
});

test('the allocator picks the node; its failure falls back to url or backs off', async () => {
  const calls = [];
  let fail = 1;
  const fetch = async (url) => {
    calls.push(url);
    if (fail-- > 0) return new Response(JSON.stringify({ error: { code: 'unavailable', message: 'no node available' } }), { status: 503, headers: { 'Retry-After': '1' } });
    return new Response(JSON.stringify({ node: 'n2', url: 'ws://n2.test:8080/ws' }), { status: 200 });
  };
  const t = setup({ url: undefined, allocator: 'http://alloc.test/', fetch });
  t.client.connect();
  const ws = await t.socket(0);
  eq(calls.length, 2, 'allocator calls (one 503, one answer)');
  eq(calls[0], 'http://alloc.test/v1/allocate?user=alice', 'allocate URL');
  eq(t.events.error[0]?.code, 'allocator_failed', 'error event');
  const retry = t.events.state.find((s) => s.state === 'reconnecting');
  ok(retry && retry.delay >= 40, `Retry-After added to the backoff (delay ${retry?.delay})`);
  eq(ws.url, 'ws://n2.test:8080/ws?user=alice', 'socket URL from the allocator');
  await t.client.close();

  const t2 = setup({ allocator: 'http://alloc.test', fetch: async () => { throw new TypeError('Failed to fetch'); } });
  t2.client.connect();
  const ws2 = await t2.socket(0);
  eq(ws2.url, 'ws://gw.test/ws?user=alice', 'fallback to url at once');
  await t2.client.close();
});

// ---- reliable delivery ---------------------------------------------------------

test('reliable duplicates are dropped; acks are cumulative and batched', async () => {
  const t = await open({ ackEvery: 3, ackDelay: 30 });
  const ws = t.ws;
  ws.push(message(1));
  ws.push(message(2));
  eq(ws.frames('ack').length, 0, 'no ack before ackDelay');
  await waitFor(() => ws.frames('ack').length === 1, 'the delayed ack');
  eq(ws.frames('ack')[0], { type: 'ack', seq: 2 }, 'cumulative ack');
  ws.push(message(2)); // a duplicate
  ws.push(message(0, { id: 'live' })); // not reliable: always delivered, never acked
  ws.push(message(3));
  ws.push(message(4));
  ws.push(message(5));
  eq(ws.frames('ack').map((f) => f.seq), [2, 5], 'ackEvery=3 acks at once');
  eq(t.events.message.map((m) => m.seq ?? m.id), [1, 2, 'live', 3, 4, 5], 'delivered in order without the duplicate');
  eq([t.client.stats.duplicates, t.client.lastSeq], [1, 5], 'duplicates and lastSeq');
  await sleep(50);
  eq(ws.frames('ack').length, 2, 'no extra ack');
  await t.client.close();
});

test('a broken connection reconnects with backoff and resumes with since', async () => {
  const t = await open();
  t.ws.push(message(1));
  t.ws.push(message(2));
  t.ws.push(message(3));
  t.ws.drop(1006);
  eq(t.events.close[0], { code: 1006, reason: '', wasClean: false, reconnect: true, delay: 5 }, 'close event');
  const ws2 = await t.socket(1);
  eq(ws2.query.get('since'), '3', 'since');
  ws2.accept({ node: 'n2', inbox_seq: 4 });
  await waitFor(() => t.client.state === 'open', 'open again');
  eq(t.events.state.map((s) => s.state), ['connecting', 'open', 'reconnecting', 'open'], 'states');
  ws2.push(message(3)); // replayed duplicate
  ws2.push(message(4));
  eq(t.events.message.map((m) => m.seq), [1, 2, 3, 4], 'no duplicate, no gap');
  eq(t.client.node, 'n2', 'node');
  await t.client.close();
});

test('stop codes 1000, 1008, 1009, 4003, 4009 do not reconnect', async () => {
  for (const code of [1000, 1008, 1009, 4003, 4009]) {
    const t = await open();
    const pending = t.client.publish({ type: 'room', id: 'lobby' }, 'chat', 'x');
    t.ws.drop(code, 'bye');
    await rejects(pending, 'connection_lost', `pending publish at ${code}`);
    eq(t.client.state, 'closed', `state after ${code}`);
    eq(t.events.state.at(-1).code, code, `state detail code ${code}`);
    eq(t.events.close.at(-1).reconnect, false, `close event of ${code}`);
    if (code === 1008 || code === 1009) eq(t.events.error.at(-1)?.code, code === 1008 ? 'policy_violation' : 'too_big', `reported ${code}`);
    await sleep(40);
    eq(t.WS.instances.length, 1, `no reconnect after ${code}`);
    await rejects(t.client.join('x'), 'not_connected', `request after ${code}`);
  }
});

test('1001, 4008, 4429 and 1006 reconnect after a backoff', async () => {
  for (const code of [1001, 4008, 4429, 1006]) {
    const t = await open({ minBackoff: 20, maxBackoff: 20, random: () => 0.9999 });
    t.ws.drop(code);
    eq(t.events.state.at(-1).state, 'reconnecting', `state after ${code}`);
    eq(t.events.state.at(-1).delay, 20, `backoff delay after ${code}`);
    await t.socket(1);
    await t.client.close();
  }
});

test('failed attempts double the full-jitter window up to maxBackoff', async () => {
  const t = setup({ minBackoff: 8, maxBackoff: 64, random: () => 0.9999999 });
  t.client.connect();
  for (let i = 0; i < 5; i++) (await t.socket(i)).drop(1006); // refused handshakes
  await t.socket(5);
  eq(t.events.state.filter((s) => s.state === 'reconnecting').map((s) => s.delay), [8, 16, 32, 64, 64], 'delays');
  eq(t.events.state.filter((s) => s.state === 'reconnecting').map((s) => s.attempt), [1, 2, 3, 4, 5], 'attempts');
  await t.client.close();
});

test('redirect then 4001: reconnect at once to the redirect URL', async () => {
  const t = await open({ minBackoff: 5000, maxBackoff: 30000 });
  t.ws.push(message(7));
  t.ws.push({ type: 'redirect', url: 'ws://n9.test:8080/ws', reason: 'draining', retry_after_ms: 0 });
  t.ws.drop(4001, 'draining');
  const st = t.events.state.at(-1);
  eq([st.state, st.url], ['reconnecting', 'ws://n9.test:8080/ws'], 'state detail');
  ok(st.delay <= 250, `small jitter, not the backoff (delay ${st.delay})`);
  const ws2 = await t.socket(1);
  eq(ws2.url, 'ws://n9.test:8080/ws?user=alice&since=7', 'redirect URL with user and since');
  eq(t.events.redirect[0]?.url, 'ws://n9.test:8080/ws', 'redirect event');
  await t.client.close();
});

test('4001 without redirect reconnects at once to the usual URL', async () => {
  const t = await open({ minBackoff: 5000, maxBackoff: 30000 });
  t.ws.drop(4001);
  ok(t.events.state.at(-1).delay <= 250, 'quick');
  eq((await t.socket(1)).url, 'ws://gw.test/ws?user=alice', 'usual URL');
  await t.client.close();
});

test('4401 calls the token function again', async () => {
  let n = 0;
  let r = 0.9999; // quick reconnect <= 250 ms, backoff 5000 ms: tells them apart
  const t = await open({ token: async () => `tok${++n}.p.s`, minBackoff: 5000, maxBackoff: 30000, random: () => r });
  eq(t.ws.protocols[1], 'bearer.tok1.p.s', 'first token');
  t.ws.drop(4401, 'token expired');
  ok(t.events.state.at(-1).delay <= 250, 'quick');
  const ws2 = await t.socket(1);
  eq(ws2.protocols[1], 'bearer.tok2.p.s', 'new token');
  ws2.accept();
  await waitFor(() => t.client.state === 'open', 'open');
  r = 0; // the next backoff is 0 ms
  ws2.drop(1006);
  const ws3 = await t.socket(2);
  eq([n, ws3.protocols[1]], [2, 'bearer.tok2.p.s'], 'the token is kept while valid');
  await t.client.close();
});

test('a failing token function is reported and retried with backoff', async () => {
  let n = 0;
  const t = setup({ token: async () => { if (++n === 1) throw new Error('auth server down'); return 'ok.p.s'; } });
  t.client.connect();
  const ws = await t.socket(0);
  eq(t.events.error[0]?.code, 'token_failed', 'error event');
  eq(t.events.state.map((s) => s.state), ['connecting', 'reconnecting'], 'states');
  eq([n, ws.protocols[1]], [2, 'bearer.ok.p.s'], 'second call used');
  await t.client.close();
});

test('4401 with a fixed token stops and reports', async () => {
  const t = await open({ token: 'fixed.p.s' });
  t.ws.drop(4401);
  eq(t.client.state, 'closed', 'state');
  eq(t.events.error.at(-1)?.code, 'token_expired', 'error event');
  await sleep(30);
  eq(t.WS.instances.length, 1, 'no reconnect');
});

// ---- requests ---------------------------------------------------------------

test('join, leave, publish and ping are answered by their reply', async () => {
  const t = await open();
  const ws = t.ws;
  const j = t.client.join('lobby');
  const pub = t.client.publish({ type: 'room', id: 'lobby' }, 'chat', { text: 'hi' });
  const dm = t.client.publish('user:bob', 'dm', 'psst');
  const lv = t.client.leave('old');
  const [fj, fp, fd, fl] = ws.sent;
  eq([fj.type, fj.room], ['join', 'lobby'], 'join frame');
  eq([fp.type, fp.target, fp.event, fp.data], ['publish', { type: 'room', id: 'lobby' }, 'chat', { text: 'hi' }], 'publish frame');
  eq(fd.target, { type: 'user', id: 'bob' }, 'short target');
  eq([fl.type, fl.room], ['leave', 'old'], 'leave frame');
  ok(new Set([fj.id, fp.id, fd.id, fl.id]).size === 4, 'distinct ids');
  ws.push({ type: 'reply', id: fp.id, ok: true });
  ws.push({ type: 'reply', id: fj.id, ok: true });
  ws.push({ type: 'reply', id: fd.id, ok: false, error: { code: 'forbidden', message: 'the token does not allow user:bob' } });
  ws.push({ type: 'reply', id: fl.id, ok: true });
  eq((await pub).ok, true, 'publish resolved');
  eq((await j).id, fj.id, 'join resolved');
  const err = await rejects(dm, 'forbidden', 'refused publish');
  eq(err.message, 'the token does not allow user:bob', 'server message');
  await lv;
  await rejects(t.client.publish({ type: 'broadcast', id: '' }, 'x'), 'bad_request', 'broadcast target');

  const ping = t.client.ping();
  const pf = ws.frames('ping').at(-1);
  ws.push({ type: 'pong', ts: pf.ts });
  ok((await ping) >= 0, 'ping resolves with the round trip');

  // An error frame (no id) answers the single pending request.
  const bad = t.client.join('x');
  ws.push({ type: 'error', code: 'rate_limited', message: 'frame dropped' });
  await rejects(bad, 'rate_limited', 'error frame');
  // With nothing pending it becomes an error event.
  ws.push({ type: 'error', code: 'bad_frame', message: 'huh' });
  eq(t.events.error.at(-1), { code: 'bad_frame', message: 'huh' }, 'error event');

  const lost = t.client.join('y');
  ws.drop(1006);
  await rejects(lost, 'connection_lost', 'pending at close');
  // While reconnecting a request waits for the next welcome; close() refuses it.
  const queued = t.client.join('z');
  await t.client.close();
  await rejects(queued, 'closed', 'queued while reconnecting, then closed');
});

test('on(name): the messages of one event, beside the message stream; client events keep their names', async () => {
  const t = await open();
  const order = [];
  const says = [];
  t.client.on('message', (m) => order.push('message:' + m.event));
  const off = t.client.on('chat.say', (m) => { says.push(m.data); order.push('chat.say'); });
  const closes = [];
  t.client.on('close', (d) => closes.push(d.code));
  t.ws.push(message(0, { event: 'chat.say', data: { text: 'hi' } }));
  t.ws.push(message(0, { event: 'chat.typing', data: {} }));
  t.ws.push(message(1, { event: 'chat.say', data: { text: 'reliable' } }));
  t.ws.push(message(0, { event: 'close', data: 'a message event named like a client event' }));
  eq(says, [{ text: 'hi' }, { text: 'reliable' }], 'chat.say listener got its two messages');
  eq(order, ['message:chat.say', 'chat.say', 'message:chat.typing', 'message:chat.say', 'chat.say', 'message:close'], 'message listeners first');
  eq(closes, [], 'a message event named close is not the close event');
  eq(t.events.message.length, 4, 'the message stream has every message');
  off();
  t.ws.push(message(0, { event: 'chat.say', data: { text: 'after off' } }));
  eq(says.length, 2, 'removed listener gets nothing');
  // A reliable room's message too.
  const room = [];
  t.client.on('score', (m) => room.push([m.target.id, m.seq]));
  t.ws.push(message(4, { event: 'score', target: { type: 'room', id: 'match' } }));
  eq(room, [['match', 4]], 'room message by event name');
  t.ws.drop(1000);
  await waitFor(() => closes.length === 1, 'close event');
  eq(closes, [1000], 'close event still the client event');
});

test('requests while (re)connecting are queued up to queueLimit and sent in order after the welcome; past it refused', async () => {
  const t = await open({ queueLimit: 3 });
  t.ws.drop(1006);
  await waitFor(() => t.client.state !== 'open', 'reconnecting');
  const j = t.client.join('a');
  const p = t.client.publish('room:a', 'chat', { n: 1 });
  const s = t.client.send('order.placed', { id: 7 });
  await rejects(t.client.join('b'), 'not_connected', 'fourth request past queueLimit 3');
  await rejects(t.client.ping(), 'not_connected', 'ping is not queued');
  const ws1 = await t.socket(1);
  eq(ws1.sent, [], 'nothing sent before the welcome');
  ws1.accept();
  eq(ws1.sent.map((f) => f.type), ['join', 'publish', 'send'], 'queued frames flushed in order after the welcome');
  eq([ws1.sent[0].room, ws1.sent[1].data, ws1.sent[2].event], ['a', { n: 1 }, 'order.placed'], 'frames as asked');
  for (const f of ws1.sent) ws1.push({ type: 'reply', id: f.id, ok: true });
  eq([(await j).ok, (await p).ok, (await s).ok], [true, true, true], 'queued requests answered');
  await t.client.close();
});

test('a request made before the first welcome waits for it; queueLimit 0 refuses at once as before', async () => {
  const t = setup();
  const c = t.client.connect();
  const j = t.client.join('lobby');
  const ws = await t.socket(0);
  ws.accept();
  await c;
  eq(ws.sent.map((f) => [f.type, f.room]), [['join', 'lobby']], 'join sent after the welcome');
  ws.push({ type: 'reply', id: ws.sent[0].id, ok: true });
  eq((await j).ok, true, 'join answered');
  await t.client.close();
  await rejects(t.client.join('x'), 'not_connected', 'a stopped client refuses');

  const u = setup({ queueLimit: 0 });
  const c2 = u.client.connect();
  await rejects(u.client.join('lobby'), 'not_connected', 'queueLimit 0');
  (await u.socket(0)).accept();
  await c2;
  await u.client.close();
  for (const bad of [-1, 1.5, '3']) {
    let threw = false;
    try { setup({ queueLimit: bad }); } catch (e) { threw = e instanceof TypeError && /queueLimit/.test(e.message); }
    ok(threw, `queueLimit ${JSON.stringify(bad)} refused`);
  }
});

test('requests time out', async () => {
  const t = await open({ requestTimeout: 20 });
  await rejects(t.client.join('slow'), 'timeout', 'no reply');
  await t.client.close();
});

test('close() acknowledges what was received, stops and rejects the waiters', async () => {
  const t = await open({ ackDelay: 10000 });
  t.ws.push(message(1));
  t.ws.push(message(2));
  const pending = t.client.join('x');
  pending.catch(() => {}); // awaited below, after close() (Node reports a rejection not yet handled)
  await t.client.close();
  eq(t.ws.frames('ack'), [{ type: 'ack', seq: 2 }], 'final ack');
  eq(t.ws.closedWith.code, 1000, 'close 1000');
  await rejects(pending, 'closed', 'pending request');
  eq(t.client.state, 'closed', 'state');
  await sleep(30);
  eq(t.WS.instances.length, 1, 'no reconnect');

  // connect() again resumes after the last seq.
  t.client.connect();
  const ws2 = await t.socket(1);
  eq(ws2.query.get('since'), '2', 'since after a restart');
  ws2.accept();
  await t.client.close();
});

test('gap moves the resume point past the lost messages', async () => {
  const t = await open();
  t.ws.push({ type: 'gap', from: 2, to: 5, missed: 4 });
  eq(t.events.gap[0], { from: 2, to: 5, missed: 4 }, 'gap event');
  eq(t.client.lastSeq, 5, 'lastSeq');
  t.ws.drop(1006);
  eq((await t.socket(1)).query.get('since'), '5', 'since');
  await t.client.close();
});

test('since option; a welcome inbox_seq below it resets the resume point', async () => {
  const t = setup({ since: 10 });
  t.client.connect();
  const ws = await t.socket(0);
  eq(ws.query.get('since'), '10', 'since from the option');
  ws.accept({ inbox_seq: 3 });
  await waitFor(() => t.client.state === 'open', 'open');
  ws.push(message(4));
  eq(t.events.message.map((m) => m.seq), [4], 'seq 4 delivered after the reset');
  await t.client.close();
});

test('no welcome within handshakeTimeout: abandon and retry', async () => {
  const t = setup({ handshakeTimeout: 30 });
  t.client.connect();
  const ws = await t.socket(0);
  ws.readyState = 1; // upgraded, but the server never says welcome
  await t.socket(1);
  eq(t.events.close[0]?.code, 1006, 'abandoned as 1006');
  ok(/no welcome/.test(t.events.close[0]?.reason), 'reason');
  await t.client.close();
});

test('unknown frame types and garbage are ignored', async () => {
  const t = await open();
  t.ws.push({ type: 'future-thing', x: 1 });
  t.ws.push('not json');
  t.ws.push(message(1));
  eq(t.events.message.length, 1, 'still delivering');
  eq(t.events.error.at(-1)?.code, 'bad_frame', 'garbage reported');
  await t.client.close();
});

// ---- v2: devices, reliable rooms, history, in-band refresh ------------------------

/** A Storage of a Map (localStorage in Node and for a clean slate). */
function memoryStorage() {
  const m = new Map();
  return { getItem: (k) => m.get(k) ?? null, setItem: (k, v) => m.set(k, String(v)), removeItem: (k) => m.delete(k), map: m };
}
const roomMessage = (room, seq, extra = {}) => message(seq, { id: `${room}-${seq}`, target: { type: 'room', id: room }, ...extra });
/** A JWT-shaped token (unsigned: the fake server does not check it) with claims. */
const jwt = (claims) => `e30.${btoa(JSON.stringify(claims)).replace(/=+$/, '').replace(/\+/g, '-').replace(/\//g, '_')}.sig`;

test('device: generated once, kept in storage, sent as device; given or null', async () => {
  const storage = memoryStorage();
  const t = await open({ device: undefined, storage });
  const id = t.client.device;
  ok(/^[A-Za-z0-9_.-]{1,64}$/.test(id), `generated id ${id} is a valid device name`);
  eq(storage.map.get('wsgate.device'), id, 'kept in storage');
  eq(t.ws.query.get('device'), id, 'sent as device');
  await t.client.close();
  const again = await open({ device: undefined, storage });
  eq(again.client.device, id, 'the same id for the next client of this storage');
  await again.client.close();
  const given = await open({ device: 'phone-1', storage });
  eq(given.ws.query.get('device'), 'phone-1', 'the given id');
  await given.client.close();
  const none = await open({ device: null });
  eq(none.ws.query.has('device'), false, 'null sends no device');
  await none.client.close();
  let threw = false;
  try { new Client({ url: 'ws://gw.test/ws', WebSocket: fakeSocket(), device: 'bad device!' }); } catch (e) { threw = e instanceof TypeError; }
  ok(threw, 'an invalid device is a TypeError');
});

test('reliable rooms: welcome.rooms is the base, per-room dedupe, no ack, room_since on reconnect', async () => {
  const t = await open({ ackDelay: 0 }, { rooms: { lobby: 5, news: 0 } });
  eq(t.client.rooms, { lobby: 5, news: 0 }, 'positions from welcome.rooms');
  eq(t.events.welcome[0].rooms, { lobby: 5, news: 0 }, 'welcome event carries rooms');
  t.ws.push(roomMessage('lobby', 5)); // at the base: already seen
  t.ws.push(roomMessage('lobby', 6));
  t.ws.push(roomMessage('news', 1));
  t.ws.push(roomMessage('lobby', 6)); // duplicate
  t.ws.push(message(1)); // a user message: its own seq space
  t.ws.push(roomMessage('news', 1, { from: 'bob' }));
  eq(t.events.message.map((m) => m.id), ['lobby-6', 'news-1', 'm1'], 'each room deduplicated on its own');
  eq(t.client.stats.duplicates, 3, 'duplicates counted');
  eq(t.client.rooms, { lobby: 6, news: 1 }, 'positions');
  eq(t.client.lastSeq, 1, 'the user seq is apart');
  await waitFor(() => t.ws.frames('ack').length > 0, 'the ack of the user message');
  eq(t.ws.frames('ack'), [{ type: 'ack', seq: 1 }], 'only the user seq is acknowledged');
  t.ws.drop(1006);
  const ws2 = await t.socket(1);
  eq(ws2.query.getAll('room_since').sort(), ['lobby:6', 'news:1'], 'room_since for each reliable room');
  eq(ws2.query.get('since'), '1', 'since for the inbox');
  // A position above the room's seq: its history was lost, the seq is the base.
  ws2.accept({ rooms: { lobby: 2, news: 1 } });
  await waitFor(() => t.client.state === 'open', 'open again');
  eq(t.client.rooms.lobby, 2, 'lost history: the new seq is the base');
  ws2.push(roomMessage('lobby', 3));
  eq(t.events.message.at(-1).id, 'lobby-3', 'delivered after the reset');
  await t.client.close();
});

test('room gap with target moves only that room; roomSince option', async () => {
  const t = await open({ roomSince: { lobby: 3 } });
  eq(t.ws.query.getAll('room_since'), ['lobby:3'], 'roomSince on the first connection');
  t.ws.push({ type: 'gap', from: 4, to: 9, missed: 6, target: { type: 'room', id: 'lobby' } });
  eq(t.events.gap, [{ from: 4, to: 9, missed: 6, target: { type: 'room', id: 'lobby' } }], 'gap event with target');
  eq(t.client.rooms.lobby, 9, 'room position past the gap');
  eq(t.client.lastSeq, 0, 'user position untouched');
  t.ws.push(roomMessage('lobby', 9));
  t.ws.push(roomMessage('lobby', 10));
  eq(t.events.message.map((m) => m.seq), [10], 'resumes after the gap');
  await t.client.close();
});

test('join sends since for a known room; history() collects the replay of a join with since', async () => {
  const t = await open({}, { rooms: { lobby: 4 } });
  const j = t.client.join('lobby');
  const f = t.ws.frames('join')[0];
  eq([f.room, f.since], ['lobby', 4], 'join with the known position');
  t.ws.push({ type: 'reply', id: f.id, ok: true });
  await j;
  const h = t.client.history('lobby', { since: 1, limit: 2 });
  const hf = t.ws.frames('join')[1];
  eq(hf.since, 1, 'history joins with since');
  t.ws.push(roomMessage('lobby', 2));
  t.ws.push(roomMessage('lobby', 3));
  t.ws.push(roomMessage('lobby', 4));
  t.ws.push(roomMessage('lobby', 5)); // past the position: also a message event
  t.ws.push({ type: 'reply', id: hf.id, ok: true });
  const res = await h;
  eq(res.messages.map((m) => m.seq), [2, 3], 'oldest first, at most limit');
  eq(res.seq, 5, 'top seq');
  eq(t.events.message.map((m) => m.seq), [5], 'only the new one is an event');
  await t.client.close();
});

test('history() reads the API when options.api is given', async () => {
  const calls = [];
  const fetch = async (url, init) => {
    calls.push({ url, init });
    return { ok: true, status: 200, json: async () => ({ seq: 7, messages: [roomMessage('lobby', 6), roomMessage('lobby', 7)] }) };
  };
  const t = await open({ api: 'http://gw.test/', apiHeaders: { Authorization: 'Bearer k' }, fetch });
  const res = await t.client.history('lob by', { since: 5, limit: 10 });
  eq(calls[0].url, 'http://gw.test/api/v1/rooms/lob%20by/history?since=5&limit=10', 'history URL');
  eq(calls[0].init.headers.Authorization, 'Bearer k', 'headers');
  eq([res.seq, res.messages.map((m) => m.id)], [7, ['lobby-6', 'lobby-7']], 'answer');
  eq(t.ws.frames('join').length, 0, 'no join');
  await t.client.close();
});

test('expiring: the token function is called and the token refreshed in band; the next connect uses it', async () => {
  const exp = Math.floor(Date.now() / 1000) + 3600;
  const tokens = [jwt({ sub: 'alice', exp: exp - 3000 }), jwt({ sub: 'alice', exp })];
  let calls = 0;
  const t = await open({ user: undefined, token: () => tokens[calls++] });
  eq(calls, 1, 'token for the first connect');
  t.ws.push({ type: 'expiring', exp: exp - 3000 });
  eq(t.events.expiring, [{ exp: exp - 3000 }], 'expiring event');
  await waitFor(() => t.ws.frames('refresh').length === 1, 'the refresh frame');
  const f = t.ws.frames('refresh')[0];
  eq(f.token, tokens[1], 'the new token');
  t.ws.push({ type: 'reply', id: f.id, ok: true });
  await waitFor(() => t.events.refresh.length === 1, 'the refresh event');
  eq(t.events.refresh[0], { ok: true, exp }, 'refresh event');
  t.ws.drop(1006);
  const ws2 = await t.socket(1);
  eq(ws2.protocols, ['wsgate.v1', 'bearer.' + tokens[1]], 'the refreshed token on reconnect');
  eq(calls, 2, 'no extra call for a fresh token');
  await t.client.close();
});

test('a refused refresh is a refresh event with ok false and an error', async () => {
  const t = await open({ user: undefined, token: () => jwt({ sub: 'alice', exp: Math.floor(Date.now() / 1000) + 3600 }) });
  t.ws.push({ type: 'expiring', exp: 1 });
  await waitFor(() => t.ws.frames('refresh').length === 1, 'the refresh frame');
  t.ws.push({ type: 'reply', id: t.ws.frames('refresh')[0].id, ok: false, error: { code: 'unauthorized', message: 'another sub' } });
  await waitFor(() => t.events.refresh.length === 1, 'the refresh event');
  eq([t.events.refresh[0].ok, t.events.refresh[0].code], [false, 'unauthorized'], 'refused');
  eq(t.events.error.at(-1)?.code, 'unauthorized', 'error event');
  await t.client.close();
});

test('a kept token about to expire is renewed before a reconnect', async () => {
  let calls = 0;
  const t = await open({ user: undefined, token: () => { calls++; return jwt({ sub: 'alice', exp: Math.floor(Date.now() / 1000) + (calls === 1 ? 10 : 3600) }); } });
  t.ws.drop(1006);
  await t.socket(1);
  eq(calls, 2, 'a token expiring within 30 s is not reused');
  await t.client.close();
});

test('send and rpc frames', async () => {
  const t = await open();
  const s = t.client.send('order', { n: 1 });
  const sf = t.ws.frames('send')[0];
  eq([sf.event, sf.data], ['order', { n: 1 }], 'send frame');
  t.ws.push({ type: 'reply', id: sf.id, ok: true });
  await s;
  const r = t.client.rpc('sum', [1, 2]);
  const rf = t.ws.frames('rpc')[0];
  eq([rf.method, rf.data], ['sum', [1, 2]], 'rpc frame');
  t.ws.push({ type: 'reply', id: rf.id, ok: true, result: 3 });
  eq(await r, 3, 'rpc result');
  await t.client.close();
});

test('room presence, joined and left, room tokens and history pages (contract §19)', async () => {
  const t = await open();
  const seen = [];
  t.client.on('joined', (d) => seen.push(['joined', d.room, d.conn_id, d.info?.name]));
  t.client.on('left', (d) => seen.push(['left', d.room, d.conn_id]));
  const j = t.client.join('meet:1', { token: 'room.jwt', data: { seat: 2 } });
  const jf = t.ws.frames('join')[0];
  eq([jf.room, jf.token, jf.data], ['meet:1', 'room.jwt', { seat: 2 }], 'join frame with token and data');
  t.ws.push({ type: 'reply', id: jf.id, ok: true });
  await j;
  t.ws.push({ type: 'joined', room: 'meet:1', user: 'bob', conn_id: 'c9', info: { name: 'Bob' } });
  t.ws.push({ type: 'left', room: 'meet:1', user: 'bob', conn_id: 'c9' });
  eq(seen, [['joined', 'meet:1', 'c9', 'Bob'], ['left', 'meet:1', 'c9']], 'joined and left events');
  const p = t.client.presence('meet:1');
  const pf = t.ws.frames('presence')[0];
  eq(pf.room, 'meet:1', 'presence frame');
  t.ws.push({ type: 'reply', id: pf.id, ok: true, result: { users: 1, connections: 2, clients: [] } });
  eq((await p).connections, 2, 'presence result');
  const h = t.client.history('meet:1', { before: 10, limit: 2 });
  await Promise.resolve();
  const hf = t.ws.frames('history')[0];
  eq([hf.before, hf.limit, hf.reverse], [10, 2, true], 'history page frame');
  t.ws.push({ type: 'reply', id: hf.id, ok: true, result: { seq: 12, messages: [{ id: 'm9', event: 'e', data: 1, ts: 1, target: { type: 'room', id: 'meet:1' }, seq: 9 }] } });
  const page = await h;
  eq([page.seq, page.messages.map((m) => m.seq)], [12, [9]], 'history page newest first');
  await t.client.close();
});

// ---- transports (contract §18) -------------------------------------------------

test('transports are validated', () => {
  for (const bad of [[], ['websocket', 'polling'], 'sse']) {
    let threw = false;
    try { new Client({ url: 'ws://gw.test/ws', WebSocket: fakeSocket(), transports: bad }); } catch (e) { threw = e instanceof TypeError; }
    ok(threw, `transports ${JSON.stringify(bad)} refused`);
  }
});

test('a WebSocket that cannot be opened falls back to SSE at once; frames are posted with the session; resume across transports', async () => {
  const h = fakeHttp();
  const t = setup({ transports: undefined, fetch: h.fetch, ackDelay: 0 });
  const p = t.client.connect();
  (await t.socket(0)).drop(1006); // refused before it opened (a proxy's 403)
  const s = await h.stream(0);
  eq([s.kind, s.method, s.url], ['sse', 'GET', 'http://gw.test/sse?user=alice'], 'the SSE request');
  s.welcome();
  await p;
  eq(t.events.open, [{ transport: 'sse', conn_id: 'c0', node: 'n1' }], 'open names the transport');
  eq(t.client.transport, 'sse', 'transport getter');
  s.comment();
  s.push(message(1), 'cur1');
  s.push(message(2), 'cur2');
  await waitFor(() => t.events.message.length === 2, 'two messages');
  eq(t.events.message.map((m) => m.seq), [1, 2], 'messages');
  await waitFor(() => h.posts.some((q) => q.body.type === 'ack' && q.body.seq === 2), 'the ack posted');
  const ackPost = h.posts.find((q) => q.body.type === 'ack');
  eq([ackPost.url, ackPost.auth], ['http://gw.test/v1/conn/c0', 'Bearer sess0'], 'posted to the node with the session');
  const pub = t.client.publish({ type: 'room', id: 'lobby' }, 'chat', 'hi');
  await waitFor(() => h.posts.some((q) => q.body.type === 'publish'), 'the publish posted');
  s.push({ type: 'reply', id: h.posts.find((q) => q.body.type === 'publish').body.id, ok: true });
  await pub;
  // The node drains: redirect, then the close frame ends the stream.
  s.push({ type: 'redirect', url: 'ws://n9.test/ws', reason: 'draining', retry_after_ms: 0 });
  s.push({ type: 'close', code: 4001, reason: 'draining' });
  s.end();
  // WebSocket is tried first again, at the redirect's node, from seq 2.
  const ws = await t.socket(1);
  eq(ws.url, 'ws://n9.test/ws?user=alice&since=2', 'the next attempt');
  eq(t.events.close.at(-1).code, 4001, 'the close frame gave the code');
  ws.drop(1006);
  const s2 = await h.stream(1);
  eq(s2.url, 'http://n9.test/sse?user=alice&since=2', 'SSE at the redirect node, resumed');
  s2.welcome({ inbox_seq: 3 });
  s2.push(message(2)); // a replayed duplicate
  s2.push(message(3));
  await waitFor(() => t.events.message.length === 3, 'the third message');
  eq(t.events.message.map((m) => m.seq), [1, 2, 3], 'no duplicate, no hole across transports');
  eq(t.client.stats.duplicates, 1, 'the replayed one dropped');
  await t.client.close();
  ok(s2.aborted, 'close() ends the stream');
});

test('a transport that closes twice before a welcome moves on; HTTP streaming reads lines and posts a batch in order', async () => {
  const h = fakeHttp();
  const t = setup({ transports: ['sse', 'stream'], fetch: h.fetch, ackDelay: 0, token: 'tok.e30.sig' });
  t.client.connect();
  (await h.stream(0)).end();
  await waitFor(() => t.events.close.length === 1, 'the first close');
  ok(t.events.close[0].delay > 0 && t.events.close[0].transport === undefined, 'the first close backs off on the same transport');
  (await h.stream(1)).end();
  const s = await h.stream(2);
  eq([s.kind, s.method, s.auth], ['stream', 'POST', 'Bearer tok.e30.sig'], 'the second close moves to stream at once, with the token');
  s.welcome();
  await waitFor(() => t.events.open.length === 1, 'open');
  eq(t.events.open[0].transport, 'stream', 'open on stream');
  h.postStatus = 202;
  const a = t.client.send('a', 1);
  const b = t.client.send('b', 2);
  const c = t.client.send('c', 3);
  await waitFor(() => h.posts.flatMap((q) => [].concat(q.body)).filter((f) => f.type === 'send').length === 3, 'three sends posted');
  eq(h.posts.flatMap((q) => [].concat(q.body)).filter((f) => f.type === 'send').map((f) => f.event), ['a', 'b', 'c'], 'in order');
  for (const f of h.posts.flatMap((q) => [].concat(q.body))) if (f.type === 'send') s.push({ type: 'reply', id: f.id, ok: true });
  await Promise.all([a, b, c]);
  s.push({ type: 'close', code: 4003, reason: 'kicked' });
  s.end();
  await waitFor(() => t.client.state === 'closed', 'stopped by 4003');
});

test('a posted frame answered 404 ends the connection; it resumes on the same transport', async () => {
  const h = fakeHttp();
  const t = setup({ transports: ['stream'], fetch: h.fetch, ackDelay: 0 });
  t.client.connect();
  const s = await h.stream(0);
  s.welcome();
  await waitFor(() => t.client.state === 'open', 'open');
  s.push(message(4));
  h.postStatus = 404; // the ack finds the connection gone
  await waitFor(() => t.events.close.length === 1, 'closed');
  eq(t.events.close[0].code, 1006, 'as a broken connection');
  ok(s.aborted, 'the stream is ended');
  const s2 = await h.stream(1);
  eq([s2.kind, s2.query.get('since')], ['stream', '4'], 'resumed from 4 on stream');
  await t.client.close();
});
