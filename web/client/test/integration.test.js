// The package against a real node: `wsgate dev` (embedded backend) started
// here, from Node.js, with Node's global WebSocket where the runtime has one
// and the `ws` package otherwise. WSGATE_BIN names the binary (make test-js
// passes bin/wsgate); without it the test builds one with `go build`.
import test from 'node:test';
import assert from 'node:assert/strict';
import { spawn, execFileSync } from 'node:child_process';
import { createServer } from 'node:net';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, dirname } from 'node:path';
import { fileURLToPath } from 'node:url';
import { Client } from '@wsgate/client';

const WS = globalThis.WebSocket ?? (await import('ws')).WebSocket;

function binary() {
  if (process.env.WSGATE_BIN) return process.env.WSGATE_BIN;
  const out = join(mkdtempSync(join(tmpdir(), 'wsgate-js-')), 'wsgate');
  execFileSync('go', ['build', '-o', out, './cmd/wsgate'], { cwd: join(dirname(fileURLToPath(import.meta.url)), '..', '..', '..'), stdio: 'inherit' });
  return out;
}

function freePort() {
  return new Promise((resolve, reject) => {
    const s = createServer();
    s.listen(0, '127.0.0.1', () => { const { port } = s.address(); s.close(() => resolve(port)); });
    s.on('error', reject);
  });
}

async function eventually(what, cond, ms = 15000) {
  const end = Date.now() + ms;
  for (;;) {
    const v = await cond().catch(() => false);
    if (v) return v;
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

/** A `wsgate dev` node on a free loopback port, killed when the test ends. */
async function startDev(t, env = {}) {
  const port = await freePort();
  const base = `http://127.0.0.1:${port}`;
  const proc = spawn(binary(), ['dev', '--listen', `127.0.0.1:${port}`], { stdio: ['ignore', 'pipe', 'pipe'], env: { ...process.env, WSGATE_NODE_ID: 'js1', ...env } });
  let log = '';
  proc.stdout.on('data', (b) => { log += b; });
  proc.stderr.on('data', (b) => { log += b; });
  t.after(() => proc.kill('SIGKILL'));
  await eventually('the node ready', async () => (await fetch(base + '/readyz')).ok).catch((err) => { throw new Error(`${err.message}\n${log}`); });
  const api = async (method, path, body) => {
    const res = await fetch(base + path, { method, headers: { 'Content-Type': 'application/json' }, body: body && JSON.stringify(body) });
    const text = await res.text();
    return { status: res.status, body: text ? JSON.parse(text) : null };
  };
  return { base, url: `ws://127.0.0.1:${port}/ws`, api };
}

/** Collects a client's events; next(type, pred) awaits one. */
function recorder(client) {
  const seen = { message: [], gap: [], welcome: [], state: [], error: [] };
  const waiting = [];
  for (const type of Object.keys(seen)) {
    client.on(type, (d) => {
      seen[type].push(d);
      for (const w of waiting.splice(0)) if (!w.check()) waiting.push(w);
    });
  }
  const until = (what, pred, ms = 10000) => new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`timed out waiting for ${what}`)), ms);
    const w = { check: () => { if (!pred(seen)) return false; clearTimeout(timer); resolve(seen); return true; } };
    if (!w.check()) waiting.push(w);
  });
  return { seen, until };
}

test('the package against a real node: rooms, reliable inbox with resume, device, reliable room history', async (t) => {
  const node = await startDev(t);
  const alice = new Client({ url: node.url, user: 'alice', WebSocket: WS, device: 'node-laptop', ackDelay: 0 });
  t.after(() => alice.close()); // before the node is killed: no reconnect keeps the test running
  const rec = recorder(alice);
  const w = await alice.connect();
  assert.equal(w.node, 'js1');
  assert.equal(w.user, 'alice');
  assert.equal(w.device, 'node-laptop', 'welcome.device is the device sent');
  await alice.join('lobby');

  // A client publish to the room comes back to its member.
  await alice.publish('room:lobby', 'chat', { text: 'hello' });
  await rec.until('the room message', (s) => s.message.some((m) => m.data?.text === 'hello'));

  // Reliable user messages: live, acknowledged, then resumed after a restart.
  for (let i = 1; i <= 3; i++) {
    const r = await node.api('POST', '/api/v1/publish', { target: { type: 'user', id: 'alice' }, event: 'n', data: { i }, reliable: true });
    assert.equal(r.status, 200, JSON.stringify(r.body));
  }
  await rec.until('3 reliable messages', (s) => s.message.filter((m) => m.seq).length === 3);
  await alice.ping(); // a barrier: the acks took effect
  await alice.close();
  for (let i = 4; i <= 5; i++) await node.api('POST', '/api/v1/publish', { target: { type: 'user', id: 'alice' }, event: 'n', data: { i }, reliable: true });
  await alice.connect();
  await rec.until('the 2 published while away', (s) => s.message.filter((m) => m.seq).length === 5);
  assert.deepEqual(rec.seen.message.filter((m) => m.target.type === 'user').map((m) => m.seq), [1, 2, 3, 4, 5], 'in order, no duplicate');

  // A reliable room: live with seq, kept, resumed with room_since, readable as history.
  for (let i = 1; i <= 3; i++) {
    const r = await node.api('POST', '/api/v1/publish', { target: { type: 'room', id: 'lobby' }, event: 'chat', data: { text: `r${i}` }, reliable: true });
    assert.equal(r.status, 200, JSON.stringify(r.body));
  }
  await rec.until('3 reliable room messages', (s) => s.message.filter((m) => m.target.type === 'room' && m.seq).length === 3);
  assert.equal(alice.rooms.lobby, 3);
  await alice.close();
  for (let i = 4; i <= 5; i++) await node.api('POST', '/api/v1/publish', { target: { type: 'room', id: 'lobby' }, event: 'chat', data: { text: `r${i}` }, reliable: true });
  const w2 = await alice.connect();
  assert.equal(w2.rooms?.lobby, 5, 'welcome.rooms');
  await rec.until('the room messages published while away', (s) => s.message.filter((m) => m.target.type === 'room' && m.seq).length === 5);
  assert.deepEqual(rec.seen.message.filter((m) => m.target.type === 'room' && m.seq).map((m) => m.seq), [1, 2, 3, 4, 5], 'room_since resumed in order, no duplicate');

  // History by join with since, on a connection that does not follow the
  // room yet (one connection never gets a room message twice).
  const carol = new Client({ url: node.url, user: 'carol', WebSocket: WS });
  t.after(() => carol.close());
  await carol.connect();
  const h = await carol.history('lobby', { since: 2, limit: 2 });
  assert.deepEqual(h.messages.map((m) => m.data.text), ['r3', 'r4'], 'history by join with since');
  assert.equal(carol.rooms.lobby, 5, 'the joined room is followed from its top');
  const viaApi = new Client({ url: node.url, user: 'alice', WebSocket: WS, api: node.base });
  t.after(() => viaApi.close());
  const h2 = await viaApi.history('lobby', { since: 0 });
  assert.equal(h2.seq, 5);
  assert.deepEqual(h2.messages.map((m) => m.seq), [1, 2, 3, 4, 5], 'history from the API');
  assert.equal(rec.seen.gap.length, 0, 'no gap');
  await alice.close();
});

test('compression: permessage-deflate with the runtime\'s WebSocket, large messages intact both ways', async (t) => {
  const node = await startDev(t); // WSGATE_COMPRESSION is on by default
  const probe = new WS(`${node.url}?user=probe`);
  await new Promise((resolve, reject) => { probe.onopen = resolve; probe.onerror = reject; });
  if (!globalThis.WebSocket) assert.match(probe.extensions, /permessage-deflate/, 'the ws package offers it and the node accepts');
  probe.close();

  const zed = new Client({ url: node.url, user: 'zed', WebSocket: WS });
  t.after(() => zed.close());
  const rec = recorder(zed);
  await zed.connect();
  const data = { items: Array.from({ length: 80 }, (_, i) => ({ id: i, name: `item-${i}`, tags: ['a', `b${i % 13}`] })) };
  const r = await node.api('POST', '/api/v1/publish', { target: { type: 'user', id: 'zed' }, event: 'big', data });
  assert.equal(r.status, 200, JSON.stringify(r.body));
  await zed.publish('user:zed', 'mine', data); // compressed by the runtime, inflated by the node
  await rec.until('both large messages', (s) => ['big', 'mine'].every((e) => s.message.some((m) => m.event === e)));
  for (const e of ['big', 'mine']) assert.deepEqual(rec.seen.message.find((m) => m.event === e).data, data);
  const metrics = await (await fetch(node.base + '/metrics')).text();
  const compressed = Number(/^wsgate_compressed_bytes_total (\S+)$/m.exec(metrics)?.[1] ?? 0);
  if (probe.extensions) assert.ok(compressed > 0 && compressed < JSON.stringify(data).length * 2, `compressed bytes ${compressed}`);
  await zed.close();
});

test('transports: a node that serves no WebSocket is reached over SSE by default, and over HTTP streaming when named', async (t) => {
  const node = await startDev(t, { WSGATE_TRANSPORTS: 'sse,stream' });
  for (const [transports, want] of [[undefined, 'sse'], [['stream'], 'stream']]) {
    const user = 'tr-' + want;
    const c = new Client({ url: node.url, user, WebSocket: WS, device: null, ackDelay: 0, transports });
    const rec = recorder(c);
    const opens = [];
    c.on('open', (o) => opens.push(o));
    const w = await c.connect();
    assert.equal(w.transport, want);
    assert.deepEqual(opens.map((o) => o.transport), [want]);
    for (let i = 1; i <= 3; i++) {
      const r = await node.api('POST', '/api/v1/publish', { target: { type: 'user', id: user }, event: 'n', data: { i }, reliable: true });
      assert.equal(r.status, 200);
    }
    await rec.until('three reliable messages', (s) => s.message.length === 3);
    assert.deepEqual(rec.seen.message.map((m) => m.seq), [1, 2, 3]);
    await c.join('tr-room');
    assert.ok((await c.ping()) >= 0, 'a posted ping answered on the stream');
    await c.close();
  }
});
