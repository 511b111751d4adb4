// Helpers of the Node tests: the cluster pusher_test.go started (from the
// environment), pusher-js clients that record what they receive, the
// `pusher` server library pointed at a node, and the application's auth
// endpoint signing with that library's authorizeChannel.
import { createServer } from 'node:http';
import PusherJS from 'pusher-js';
import PusherServer from 'pusher';

const env = (k) => {
  const v = process.env[k];
  if (!v) throw new Error(`${k} is not set: these tests are run by pusher_test.go (go test ./test/pusher)`);
  return v;
};

export const app = { appId: env('PUSHER_APP_ID'), key: env('PUSHER_KEY'), secret: env('PUSHER_SECRET') };
/** node id -> http://127.0.0.1:PORT */
export const nodes = JSON.parse(env('WSGATE_TEST_NODES'));
/** The balancer in front of the nodes. */
export const lbPort = Number(env('WSGATE_TEST_LB_PORT'));
const control = env('WSGATE_TEST_CONTROL');

export const portOf = (id) => Number(new URL(nodes[id]).port);

/** Drives the cluster: kill, start or drain a node (pusher_test.go). */
export async function ctl(action, id) {
  const res = await fetch(`${control}/${action}/${id}`, { method: 'POST' });
  if (!res.ok && res.status !== 202) throw new Error(`${action} ${id}: ${res.status} ${await res.text()}`);
}

/** The Pusher webhook requests ({headers, body}) the nodes made after the first `after`; waits up to 10 s for one. */
export async function webhooks(after) {
  const res = await fetch(`${control}/webhooks?after=${after}`);
  return res.json();
}

/** The server library, publishing through node id's Pusher HTTP API. */
export function server(id) {
  return new PusherServer({ appId: app.appId, key: app.key, secret: app.secret, host: '127.0.0.1', port: String(portOf(id)), useTLS: false });
}

/**
 * The application's auth endpoint: signs every subscription with the
 * server library, for the user named in the request's `user` parameter
 * (its presence channel_data), except users named `mallory`, whose
 * subscriptions are signed with a wrong secret.
 */
export async function authServer(t) {
  const lib = new PusherServer({ appId: app.appId, key: app.key, secret: app.secret });
  const forger = new PusherServer({ appId: app.appId, key: app.key, secret: 'not-the-secret-0123456789abcdef' });
  const calls = [];
  const srv = createServer(async (req, res) => {
    let body = '';
    for await (const chunk of req) body += chunk;
    const p = new URLSearchParams(body);
    const user = p.get('user');
    const socketId = p.get('socket_id');
    const channel = p.get('channel_name');
    calls.push({ user, socketId, channel });
    const signer = user === 'mallory' ? forger : lib;
    const auth = channel.startsWith('presence-')
      ? signer.authorizeChannel(socketId, channel, { user_id: user, user_info: { name: user.toUpperCase() } })
      : signer.authorizeChannel(socketId, channel);
    res.writeHead(200, { 'Content-Type': 'application/json' });
    res.end(JSON.stringify(auth));
  });
  await new Promise((r) => srv.listen(0, '127.0.0.1', r));
  t.after(() => srv.close());
  return { url: `http://127.0.0.1:${srv.address().port}/pusher/auth`, calls };
}

/** pusher-js options for a client of user, on port (a node or the balancer). */
export function clientOptions(port, auth, user) {
  return {
    wsHost: '127.0.0.1', wsPort: port, forceTLS: false, enabledTransports: ['ws'], cluster: 'mt1', disableStats: true,
    channelAuthorization: { endpoint: auth.url, transport: 'ajax', params: { user } },
  };
}

/**
 * A pusher-js client that records every frame it receives ({event,
 * channel, data}, the protocol's own pusher_internal:* ones included),
 * its connection states and errors; until(what, pred) awaits a condition
 * on them.
 */
export function client(t, port, auth, user) {
  const p = new PusherJS(app.key, clientOptions(port, auth, user));
  t.after(() => p.disconnect());
  return record(p);
}

/** Adds recording to a pusher-js instance (also one Laravel Echo made). */
export function record(p) {
  const seen = { events: [], states: [], errors: [] };
  const waiting = [];
  const changed = () => { for (const w of waiting.splice(0)) if (!w.check()) waiting.push(w); };
  p.connection.bind('message', (m) => { seen.events.push({ event: m.event, channel: m.channel, data: m.data }); changed(); });
  p.connection.bind('state_change', (s) => { seen.states.push(s.current); changed(); });
  p.connection.bind('error', (e) => { seen.errors.push(e); changed(); });
  const until = (what, pred, ms = 15000) => new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`${p.connection.socket_id ?? 'client'}: timed out waiting for ${what}; seen ${JSON.stringify(seen).slice(0, 3000)}`)), ms);
    const w = { check: () => { let v; try { v = pred(seen); } catch (err) { clearTimeout(timer); reject(err); return true; } if (!v) return false; clearTimeout(timer); resolve(v); return true; } };
    if (!w.check()) waiting.push(w);
  });
  /** Subscribes and awaits the subscription (or its error). */
  const subscribe = (name) => new Promise((resolve, reject) => {
    const ch = p.subscribe(name);
    const timer = setTimeout(() => reject(new Error(`no subscription to ${name} within 15s; errors ${JSON.stringify(seen.errors)}`)), 15000);
    ch.bind('pusher:subscription_succeeded', (members) => { clearTimeout(timer); resolve({ ch, members }); });
    ch.bind('pusher:subscription_error', (err) => { clearTimeout(timer); reject(Object.assign(new Error(`subscription to ${name} failed: ${JSON.stringify(err)}`), { status: err })); });
  });
  /** Resolves with the data of the next `event` on channel `name`. */
  const next = (ch, event, pred = () => true, ms = 15000) => new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`no ${event} on ${ch.name} within ${ms}ms`)), ms);
    const fn = (data, meta) => { if (!pred(data, meta)) return; clearTimeout(timer); ch.unbind(event, fn); resolve({ data, meta }); };
    ch.bind(event, fn);
  });
  return { p, seen, until, subscribe, next };
}

/** Resolves once p is connected (at once if it is). */
export function connected(c) {
  return c.until('connected', () => c.p.connection.state === 'connected');
}

/** Polls an async check (an HTTP API answer) until it holds. */
export async function eventually(what, cond, ms = 15000) {
  const end = Date.now() + ms;
  for (;;) {
    let err;
    const v = await cond().catch((e) => { err = e; return false; });
    if (v) return v;
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}${err ? `: ${err.message}` : ''}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

/** A promise settled by its resolve, or rejected after ms naming what. */
export function deferred(what, ms = 15000) {
  let resolve;
  const promise = new Promise((res, rej) => {
    const timer = setTimeout(() => rej(new Error(`timed out waiting for ${what}`)), ms);
    resolve = (v) => { clearTimeout(timer); res(v); };
  });
  return { promise, resolve };
}
