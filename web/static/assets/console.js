// wsgate console: live nodes and rates, connections, publish, presence,
// room members, drain.

import { Api, ApiError } from './api.js';
import { History, Sparkline, WINDOW_MS } from './chart.js';
import { ago, clock, duration, h, num, replace } from './dom.js';

const KEY_STORAGE = 'wsgate.console.apiKey';
const REFRESH_MS = 2000;
const HEARTBEAT_LATE_MS = 5000;
const HEARTBEAT_DEAD_MS = 8000;

const $ = (id) => document.getElementById(id);

const api = new Api({ key: loadKey() });
const history = new History();
/** @type {Map<string, {el: HTMLElement, refs: Record<string, HTMLElement>, chart: Sparkline, node: any}>} */
const cards = new Map();

let timer = null;
let lastOk = 0;
let loadedOnce = false;
let waitingForKey = false;
let nodes = [];
let refreshes = 0;
// The history of the serving gateway (GET /api/v1/stats): the newest
// sample's time, the newest sample (its rates), and whether the gateway
// has the endpoint (an older one does not: the page samples by itself).
let statsSince = 0;
let lastSample = null;
let statsOk = true;

// ---- API key -------------------------------------------------------------

function loadKey() {
  try { return sessionStorage.getItem(KEY_STORAGE) ?? ''; } catch { return ''; }
}

function saveKey(key) {
  try {
    if (key) sessionStorage.setItem(KEY_STORAGE, key);
    else sessionStorage.removeItem(KEY_STORAGE);
  } catch { /* storage disabled: the key lives in memory only */ }
  api.key = key;
}

function setKeyState(mode) {
  const el = $('key-state');
  el.hidden = mode === 'unknown';
  el.textContent = mode === 'none' ? 'No key needed (dev)' : mode === 'ok' ? 'Key accepted' : '';
  $('key-button').textContent = mode === 'none' ? 'API key' : api.key ? 'Change key' : 'Enter key';
}

function openKeyDialog(why) {
  const d = $('key-dialog');
  $('key-why').textContent = why;
  $('key-input').value = '';
  $('key-forget').hidden = !api.key;
  if (!d.open) d.showModal();
  $('key-input').focus();
}

$('key-form').addEventListener('submit', (e) => {
  e.preventDefault();
  const key = $('key-input').value.trim();
  if (!key) { $('key-input').focus(); return; }
  saveKey(key);
  $('key-dialog').close();
  waitingForKey = false;
  refresh();
});
$('key-cancel').addEventListener('click', () => $('key-dialog').close());
$('key-forget').addEventListener('click', () => {
  saveKey('');
  $('key-dialog').close();
  toast('API key forgotten');
  waitingForKey = false;
  refresh();
});
$('key-button').addEventListener('click', () => openKeyDialog(api.key
  ? 'Enter another key for this gateway (WSGATE_API_KEY), or forget the current one.'
  : 'Enter the key of this gateway\'s server API (WSGATE_API_KEY).'));

// ---- banners and toasts --------------------------------------------------

function banner(kind, title, detail, action) {
  const slot = $('banner');
  if (!kind) { slot.replaceChildren(); return; }
  replace(slot, h('div', { class: `banner ${kind}`, dataset: { kind: title } },
    h('div', { class: 'grow' }, h('strong', { text: title }), detail && h('span', { class: 'detail', text: detail })),
    action && h('button', { class: 'btn small secondary', type: 'button', onclick: action.run, text: action.label }),
  ));
}

function toast(text, kind = '') {
  const t = h('div', { class: `toast ${kind}`, role: 'status', text });
  $('toasts').append(t);
  setTimeout(() => t.remove(), 4500);
}

function setLive(kind, text) {
  $('live-dot').className = `dot ${kind}`;
  $('live-text').textContent = text;
}

/** Shows what went wrong; true when the error was the API key. */
function showError(err) {
  if (!(err instanceof ApiError)) {
    banner('error', 'Unexpected error', String(err?.message ?? err));
    return false;
  }
  switch (true) {
    case err.status === 401:
      waitingForKey = true;
      setKeyState('unknown');
      setLive('warn', 'API key needed');
      if (api.key) {
        banner('error', 'The API key was refused (401)', `${err.message}. Enter the key configured as WSGATE_API_KEY on the gateway.`,
          { label: 'Enter key', run: () => openKeyDialog('The key was refused. Enter the key configured as WSGATE_API_KEY.') });
        openKeyDialog('The key was refused. Enter the key configured as WSGATE_API_KEY.');
      } else {
        banner('warn', 'This gateway needs an API key', 'The server API answered 401: enter the key configured as WSGATE_API_KEY.',
          { label: 'Enter key', run: () => openKeyDialog('Enter the key of this gateway\'s server API (WSGATE_API_KEY).') });
        openKeyDialog('This gateway\'s server API needs a key (WSGATE_API_KEY).');
      }
      return true;
    case err.status === 503:
      banner('error', 'Cluster backend unavailable (503)', `${err.message}. The gateway is up but cannot reach its cluster backend (Redis); the data below may be stale. Retrying every 2 s.`);
      setLive('bad', 'Backend down');
      return false;
    case err.status === 0:
      banner('error', 'Gateway unreachable', `${err.message}. The node that serves this console may be down or restarting; retrying every 2 s.`);
      setLive('bad', 'Unreachable');
      return false;
    default:
      banner('error', `The gateway answered ${err.status}`, err.message);
      setLive('bad', `Error ${err.status}`);
      return false;
  }
}

// ---- nodes -----------------------------------------------------------------

async function refresh() {
  clearTimeout(timer);
  timer = null;
  try {
    const [data] = await Promise.all([api.nodes(), loadStats()]);
    lastOk = Date.now();
    document.body.dataset.refreshes = String(++refreshes);
    banner(null);
    setKeyState(api.key ? 'ok' : 'none');
    $('nodes').classList.remove('stale');
    renderNodes(Array.isArray(data?.nodes) ? data.nodes : []);
  } catch (err) {
    showError(err);
    $('nodes').classList.add('stale');
  } finally {
    if (!waitingForKey) timer = setTimeout(refresh, REFRESH_MS);
  }
  tick();
}

/** Adds the gateway's samples since the last call to the charts' history. */
async function loadStats() {
  if (!statsOk) return;
  try {
    const res = await api.stats(statsSince);
    for (const s of Array.isArray(res?.samples) ? res.samples : []) {
      for (const [id, v] of Object.entries(s.nodes ?? {})) history.add(id, s.t, Number(v.connections) || 0);
      statsSince = Math.max(statsSince, s.t);
      lastSample = s;
    }
    statsInterval = Number(res?.interval_ms) || statsInterval;
  } catch (err) {
    if (err instanceof ApiError && err.status === 404) { statsOk = false; return; }
    throw err;
  }
}
let statsInterval = REFRESH_MS;

/** A node's rates in the newest sample: [published, delivered] per second. */
function rates(id) {
  const r = lastSample?.nodes?.[id];
  return r ? [Number(r.publish_rate) || 0, Number(r.delivery_rate) || 0] : null;
}

/** 0, 0.4, 12.5, 1,234 (per second). */
function rate(v) {
  if (!Number.isFinite(v)) return '–';
  return v >= 100 ? num(Math.round(v)) : String(Math.round(v * 10) / 10);
}

function isSelf(n) {
  try { return new URL(n.url).host === location.host; } catch { return false; }
}

function renderNodes(list) {
  const now = Date.now();
  list.sort((a, b) => String(a.id).localeCompare(String(b.id), 'en', { numeric: true }));
  const seen = new Set();
  for (const n of list) {
    seen.add(n.id);
    if (!statsOk) history.add(n.id, now, Number(n.connections) || 0);
    let c = cards.get(n.id);
    if (!c) {
      c = nodeCard(n);
      cards.set(n.id, c);
      if (loadedOnce) toast(`Node ${n.id} joined the cluster`);
    }
    c.node = n;
    updateCard(c, n, now);
  }
  // Nodes the gateway's history has and the list has not left before the
  // page was opened: shown as left from their last sample.
  if (!loadedOnce) {
    for (const [id, s] of history.series) {
      if (seen.has(id) || cards.has(id) || !s.length) continue;
      const c = nodeCard({ id });
      c.leftAt = s[s.length - 1][0] + statsInterval;
      history.add(id, c.leftAt, 0);
      cards.set(id, c);
    }
  }
  // A node that is gone (drained, crashed, stale heartbeat) stays as "left"
  // for the chart's window, so that its last minutes remain visible.
  for (const [id, c] of cards) {
    if (seen.has(id)) continue;
    if (!c.leftAt) {
      c.leftAt = now;
      history.add(id, now, 0);
      toast(`Node ${id} left the cluster`);
    }
    if (now - c.leftAt > WINDOW_MS) {
      c.el.remove();
      cards.delete(id);
      continue;
    }
    markLeft(c, now);
  }
  history.prune(now);
  // Keep the DOM in id order.
  const box = $('nodes');
  const order = [...cards.keys()].sort((a, b) => a.localeCompare(b, 'en', { numeric: true }));
  let i = 0;
  for (const id of order) {
    const el = cards.get(id).el;
    if (box.children[i] !== el) box.insertBefore(el, box.children[i] ?? null);
    i++;
  }
  $('nodes-empty').hidden = cards.size > 0;
  if (!cards.size) {
    $('nodes-empty').textContent = 'No node in the cluster answered its heartbeat.';
    box.append($('nodes-empty'));
  }
  nodes = list;
  loadedOnce = true;
  renderSummary(list);
}

function nodeCard(n) {
  const refs = {};
  const r = (name, el) => (refs[name] = el);
  const chart = new Sparkline(`Connections of node ${n.id} over the last 5 minutes`);
  const el = h('article', { class: 'node card', dataset: { node: n.id } },
    h('div', { class: 'node-head' },
      r('dot', h('span', { class: 'dot' })),
      h('h3', { text: n.id, title: n.id }),
      isSelf(n) && h('span', { class: 'node-self', text: 'THIS GATEWAY' }),
      r('status', h('span', { class: 'badge' })),
    ),
    r('url', h('div', { class: 'node-url mono' })),
    h('div', { class: 'metrics' },
      h('div', { class: 'metric' }, h('span', { class: 'k', text: 'Connections' }), r('conns', h('span', { class: 'v big', dataset: { field: 'connections' } }))),
      h('div', { class: 'metric' }, h('span', { class: 'k', text: 'Weight' }), r('weight', h('span', { class: 'v', dataset: { field: 'weight' } }))),
      h('div', { class: 'metric' }, h('span', { class: 'k', text: 'Heartbeat' }), r('beat', h('span', { class: 'v', dataset: { field: 'heartbeat' } }))),
      h('div', { class: 'metric rate' }, h('span', { class: 'k', text: 'Published / s' }), r('pub', h('span', { class: 'v', dataset: { field: 'publish_rate' } }))),
      h('div', { class: 'metric rate' }, h('span', { class: 'k', text: 'Delivered / s' }), r('del', h('span', { class: 'v', dataset: { field: 'delivery_rate' } }))),
    ),
    chart.el,
    h('div', { class: 'node-foot' },
      r('meta', h('span', { class: 'meta' })),
      h('span', { class: 'spacer' }),
      r('drain', h('button', { class: 'btn small danger-outline', type: 'button', dataset: { action: 'drain' }, text: 'Drain', onclick: () => askDrain(n.id) })),
    ),
  );
  return { el, refs, chart, node: n };
}

function markLeft(c, now) {
  const { refs } = c;
  c.el.dataset.status = 'left';
  refs.status.textContent = 'left';
  refs.status.className = 'badge';
  refs.dot.className = 'dot';
  refs.conns.textContent = '0';
  refs.beat.textContent = '–';
  refs.beat.className = 'v';
  refs.pub.textContent = '–';
  refs.del.textContent = '–';
  refs.meta.textContent = `left ${ago(now - c.leftAt)}`;
  refs.drain.hidden = true;
  c.chart.update(history.get(c.node.id), now, c.leftAt);
}

function updateCard(c, n, now) {
  const { refs } = c;
  c.leftAt = 0;
  refs.drain.hidden = false;
  const status = String(n.status ?? 'unknown');
  c.el.dataset.status = status;
  refs.status.textContent = status;
  refs.status.className = `badge ${status}`;
  refs.url.textContent = n.url ?? '';
  refs.url.title = n.url ?? '';
  refs.conns.textContent = num(Number(n.connections) || 0);
  refs.weight.textContent = String(n.weight ?? '–');
  const r = rates(n.id);
  refs.pub.textContent = r ? rate(r[0]) : '–';
  refs.del.textContent = r ? rate(r[1]) : '–';
  const age = Number(n.heartbeat_age_ms);
  refs.beat.textContent = Number.isFinite(age) ? duration(age) : '–';
  refs.beat.className = `v ${age > HEARTBEAT_DEAD_MS ? 'dead' : age > HEARTBEAT_LATE_MS ? 'late' : ''}`;
  refs.beat.title = 'Time since the node last reported its state';
  const beatKind = age > HEARTBEAT_DEAD_MS ? 'bad' : status === 'draining' ? 'bad' : status === 'warming' || age > HEARTBEAT_LATE_MS ? 'warn' : 'ok';
  refs.dot.className = `dot ${beatKind}`;
  const up = n.started_at ? `up ${duration(now - n.started_at).replace(/ \d+ s$/, '')}` : '';
  refs.meta.textContent = [n.version && `v${String(n.version).replace(/^v/, '')}`, up].filter(Boolean).join(' · ');
  refs.drain.disabled = status === 'draining';
  refs.drain.textContent = status === 'draining' ? 'Draining…' : 'Drain';
  c.chart.update(history.get(n.id), now);
}

function renderSummary(list) {
  const count = (s) => list.filter((n) => n.status === s).length;
  const active = count('active');
  const parts = [`${active} active`];
  if (count('warming')) parts.push(`${count('warming')} warming`);
  if (count('draining')) parts.push(`${count('draining')} draining`);
  const left = [...cards.values()].filter((c) => c.leftAt).length;
  if (left) parts.push(`${left} left recently`);
  $('sum-nodes').textContent = String(list.length);
  $('sum-nodes-sub').textContent = parts.join(' · ');
  const total = list.reduce((s, n) => s + (Number(n.connections) || 0), 0);
  $('sum-conns').textContent = num(total);
  $('sum-conns-sub').textContent = active ? `${num(Math.round(total / Math.max(1, list.length)))} per node on average` : '\u00a0';
  const live = list.map((n) => rates(n.id)).filter(Boolean);
  const pubSum = live.reduce((s, r) => s + r[0], 0);
  const delSum = live.reduce((s, r) => s + r[1], 0);
  $('sum-rate').textContent = live.length ? rate(pubSum) : '–';
  $('sum-rate-sub').textContent = live.length ? `published · ${rate(delSum)} delivered / s` : (statsOk ? '\u00a0' : 'needs a newer gateway');
  syncConnsNodes(list);
  const versions = [...new Set(list.map((n) => n.version).filter(Boolean))];
  $('foot-version').textContent = versions.length ? `gateway ${versions.join(', ')}` : '';
}

/** Updates the "updated … ago" text between refreshes. */
function tick() {
  if (waitingForKey) return;
  if (!lastOk) return;
  const age = Date.now() - lastOk;
  if ($('banner').childElementCount === 0) setLive(age > 3 * REFRESH_MS ? 'warn' : 'ok', `Live · updated ${ago(age)}`);
}
setInterval(tick, 1000);

// ---- drain -------------------------------------------------------------------

let drainTarget = null;

function askDrain(id) {
  const n = cards.get(id)?.node;
  if (!n) return;
  drainTarget = id;
  const conns = Number(n.connections) || 0;
  $('drain-title').textContent = `Drain node ${id}?`;
  $('drain-text').textContent = `${id} will stop accepting connections, redirect its ${num(conns)} connection${conns === 1 ? '' : 's'} `
    + 'to other active nodes at the configured rate (WSGATE_DRAIN_RATE), then leave the cluster and exit. '
    + 'Reliable messages are kept and resumed by the clients.';
  const others = nodes.filter((x) => x.id !== id && x.status === 'active').length;
  const warn = $('drain-warning');
  warn.hidden = others > 0;
  warn.textContent = others > 0 ? '' : 'No other active node: its clients will be closed with 1001 and reconnect with backoff until a node is available.';
  $('drain-confirm').textContent = `Drain ${id}`;
  $('drain-dialog').showModal();
  $('drain-cancel').focus();
}

$('drain-cancel').addEventListener('click', () => $('drain-dialog').close());
$('drain-form').addEventListener('submit', async (e) => {
  e.preventDefault();
  const id = drainTarget;
  $('drain-dialog').close();
  if (!id) return;
  const c = cards.get(id);
  if (c) { c.refs.drain.disabled = true; c.refs.drain.textContent = 'Draining…'; }
  try {
    await api.drain(id);
    toast(`Drain started on ${id}`);
  } catch (err) {
    if (c) { c.refs.drain.disabled = false; c.refs.drain.textContent = 'Drain'; }
    toast(`Drain of ${id} failed: ${err.message}`, 'error');
    if (err.status === 401) showError(err);
  }
  refresh();
});

// ---- connections -----------------------------------------------------------------

const CONNS_PAGE = 25;
let connsNode = '';
let connsCursors = ['']; // the cursor of each page up to the one shown
let connsPage = 0;

/** Keeps the node picker in line with the node list (this gateway first chosen). */
function syncConnsNodes(list) {
  const sel = $('conns-node');
  const ids = list.map((n) => n.id);
  if ([...sel.options].map((o) => o.value).join('\n') === ids.join('\n')) return;
  const cur = sel.value;
  replace(sel, list.map((n) => h('option', { value: n.id, text: isSelf(n) ? `${n.id} (this gateway)` : n.id })));
  sel.value = ids.includes(cur) ? cur : (list.find(isSelf)?.id ?? ids[0] ?? '');
}

async function loadConns(page) {
  const out = $('conns-result');
  const node = connsNode;
  if (!node) { result(out, 'error', 'No node to list'); return; }
  try {
    const res = await api.connections(node, connsCursors[page], CONNS_PAGE);
    const list = Array.isArray(res?.connections) ? res.connections : [];
    connsPage = page;
    connsCursors.length = page + 1;
    if (res?.cursor) connsCursors.push(res.cursor);
    $('conns-prev').disabled = page === 0;
    $('conns-next').disabled = !res?.cursor;
    $('conns-page').textContent = `page ${page + 1}`;
    if (!list.length) {
      result(out, '', page ? `No more connections on ${node}` : `${node} has no open connection`);
      return;
    }
    const now = Date.now();
    const first = page * CONNS_PAGE + 1;
    const table = h('table', { class: 'conn-table' },
      h('thead', {}, h('tr', {}, ['User', 'Device', 'Transport', 'Rooms', 'Age', ''].map((x) => h('th', { text: x })))),
      h('tbody', {}, list.map((c) => {
        const rooms = Array.isArray(c.rooms) ? c.rooms : [];
        return h('tr', { dataset: { conn: c.conn_id, user: c.user } },
          h('td', { text: c.user, title: `connection ${c.conn_id}`, dataset: { label: 'User', field: 'user' } }),
          h('td', { text: c.device ?? '', dataset: { label: 'Device', field: 'device' } }),
          h('td', { text: c.transport ?? '', dataset: { label: 'Transport', field: 'transport' } }),
          h('td', { class: 'rooms', text: rooms.length ? rooms.join(', ') : '–', dataset: { label: 'Rooms', field: 'rooms' } }),
          h('td', { text: c.connected_at ? age(now - c.connected_at) : '–', title: c.connected_at ? clock(c.connected_at) : '', dataset: { label: 'Age', field: 'age' } }),
          h('td', { class: 'act' }, h('button', { class: 'btn small danger-outline', type: 'button', dataset: { action: 'disconnect' }, text: 'Disconnect', onclick: () => askKick(node, c) })),
        );
      })));
    result(out, 'ok', `${node} · connections ${first}–${first + list.length - 1}${res?.cursor ? '' : ' (last page)'}`, table);
  } catch (err) {
    result(out, 'error', errorText(err));
    if (err.status === 401) showError(err);
  }
}

/** A connection's age: "< 1 s", "42 s", "3 min 5 s". */
function age(ms) {
  return ms < 1000 ? '< 1 s' : duration(ms).replace(/\.\d/, '');
}

$('conns-form').addEventListener('submit', (e) => {
  e.preventDefault();
  connsNode = $('conns-node').value;
  connsCursors = [''];
  loadConns(0);
});
$('conns-prev').addEventListener('click', () => loadConns(Math.max(0, connsPage - 1)));
$('conns-next').addEventListener('click', () => loadConns(connsPage + 1));

let kickTarget = null;

function askKick(node, c) {
  kickTarget = { node, c };
  const rooms = Array.isArray(c.rooms) && c.rooms.length ? `in ${c.rooms.join(', ')}` : 'in no room';
  $('kick-title').textContent = `Disconnect ${c.user}?`;
  $('kick-text').textContent = `The ${c.transport} connection ${c.conn_id} of ${c.user} on ${node} (device ${c.device}, ${rooms}) `
    + 'will be closed with code 4003, "disconnected by the server API": a client does not reconnect by itself after it. '
    + `${c.user}'s other connections stay open.`;
  $('kick-dialog').showModal();
  $('kick-cancel').focus();
}

$('kick-cancel').addEventListener('click', () => $('kick-dialog').close());
$('kick-form').addEventListener('submit', async (e) => {
  e.preventDefault();
  $('kick-dialog').close();
  const t = kickTarget;
  kickTarget = null;
  if (!t) return;
  const row = [...$('conns-result').querySelectorAll('tr[data-conn]')].find((r) => r.dataset.conn === t.c.conn_id);
  row?.classList.add('closing');
  try {
    const res = await api.disconnectConn(t.c.conn_id);
    toast(res?.disconnected ? `Disconnected ${t.c.user} (${t.c.conn_id})` : `Close of ${t.c.conn_id} requested; ${t.node} has not confirmed it yet`);
  } catch (err) {
    row?.classList.remove('closing');
    toast(`Disconnect of ${t.c.conn_id} failed: ${err.message}`, 'error');
    if (err.status === 401) showError(err);
  }
  if (connsNode === t.node) loadConns(connsPage);
  refresh();
});

// ---- publish -------------------------------------------------------------------

const pubForm = $('publish-form');

function targetType() {
  return pubForm.querySelector('input[name="ttype"]:checked').value;
}

function syncPublishForm() {
  const t = targetType();
  $('pub-id-row').hidden = t === 'broadcast';
  $('pub-id-label').textContent = t === 'room' ? 'Room' : 'User id';
  $('pub-id').placeholder = t === 'room' ? 'lobby' : 'alice';
  const rel = $('pub-reliable');
  rel.disabled = t !== 'user';
  if (rel.disabled) rel.checked = false;
  $('pub-reliable-hint').textContent = t === 'user' ? 'kept in the user\'s inbox until acknowledged' : 'only for user targets';
}
pubForm.addEventListener('change', (e) => { if (e.target.name === 'ttype') syncPublishForm(); });
syncPublishForm();

function parseData() {
  const raw = $('pub-data').value.trim();
  if (raw === '') return { ok: true, value: null };
  try { return { ok: true, value: JSON.parse(raw) }; } catch (err) { return { ok: false, error: err.message }; }
}

$('pub-data').addEventListener('input', () => {
  const r = parseData();
  $('pub-data').classList.toggle('invalid', !r.ok);
  $('pub-data-hint').textContent = r.ok ? 'Any JSON value.' : `Not valid JSON: ${r.error}`;
  $('pub-data-hint').classList.toggle('error', !r.ok);
});

pubForm.addEventListener('submit', async (e) => {
  e.preventDefault();
  const out = $('pub-result');
  const type = targetType();
  const id = $('pub-id').value.trim();
  if (type !== 'broadcast' && !id) {
    result(out, 'error', type === 'room' ? 'Enter a room' : 'Enter a user id');
    $('pub-id').focus();
    return;
  }
  const data = parseData();
  if (!data.ok) {
    result(out, 'error', `Data is not valid JSON: ${data.error}`);
    $('pub-data').focus();
    return;
  }
  const body = {
    target: type === 'broadcast' ? { type } : { type, id },
    event: $('pub-event').value.trim(),
    data: data.value,
    class: $('pub-class').value,
  };
  if ($('pub-reliable').checked) body.reliable = true;
  $('pub-submit').disabled = true;
  try {
    const res = await api.publish(body);
    const rows = [['id', res?.id ?? '–']];
    if (res?.seq) rows.push(['seq', String(res.seq)]);
    if (typeof res?.online === 'boolean') {
      rows.push(['online', res.online ? 'yes: delivered to its connections'
        : body.reliable ? 'no: kept in the inbox for the next connect' : 'no: nobody received it']);
    }
    const to = type === 'broadcast' ? 'everyone' : `${type} ${id}`;
    result(out, 'ok', `Published "${body.event || '(no event)'}" to ${to}`, dl(rows));
  } catch (err) {
    result(out, 'error', errorText(err));
    if (err.status === 401) showError(err);
  } finally {
    $('pub-submit').disabled = false;
  }
});

// ---- presence and members --------------------------------------------------

$('presence-form').addEventListener('submit', async (e) => {
  e.preventDefault();
  const out = $('presence-result');
  const user = $('presence-user').value.trim();
  if (!user) { result(out, 'error', 'Enter a user id'); return; }
  try {
    const res = await api.presence(user);
    const conns = Array.isArray(res?.connections) ? res.connections : [];
    if (!res?.online || conns.length === 0) {
      result(out, '', h('span', {}, h('span', { class: 'dot' }), ` ${user} is offline`));
      return;
    }
    const now = Date.now();
    const table = h('table', {},
      h('thead', {}, h('tr', {}, h('th', { text: 'Connection' }), h('th', { text: 'Node' }), h('th', { text: 'Since' }))),
      h('tbody', {}, conns.map((c) => h('tr', {},
        h('td', { text: c.conn_id }),
        h('td', { text: c.node }),
        h('td', { text: c.connected_at ? `${clock(c.connected_at)} (${ago(now - c.connected_at)})` : '–' }),
      ))));
    result(out, 'ok', h('span', {}, h('span', { class: 'dot ok' }), ` ${user} is online · ${conns.length} connection${conns.length === 1 ? '' : 's'}`), table);
  } catch (err) {
    result(out, 'error', errorText(err));
    if (err.status === 401) showError(err);
  }
});

$('members-form').addEventListener('submit', async (e) => {
  e.preventDefault();
  const out = $('members-result');
  const room = $('members-room').value.trim();
  if (!room) { result(out, 'error', 'Enter a room'); return; }
  try {
    const res = await api.members(room);
    const members = Array.isArray(res?.members) ? [...res.members].sort() : [];
    if (!members.length) {
      result(out, '', `${room} has no members`);
      return;
    }
    result(out, 'ok', `${room} · ${members.length} member${members.length === 1 ? '' : 's'}`,
      h('div', { class: 'chips' }, members.map((m) => h('span', { class: 'chip', text: m }))));
  } catch (err) {
    result(out, 'error', errorText(err));
    if (err.status === 401) showError(err);
  }
});

$('rooms-form').addEventListener('submit', async (e) => {
  e.preventDefault();
  const out = $('rooms-result');
  const prefix = $('rooms-prefix').value.trim();
  try {
    const res = await api.rooms(prefix);
    const rooms = Array.isArray(res?.rooms) ? res.rooms : [];
    if (!rooms.length) {
      result(out, '', prefix ? `No room starting with ${prefix} has anyone present` : 'No room has anyone present');
      return;
    }
    const table = h('table', { class: 'conns' },
      h('thead', {}, h('tr', {}, ['Room', 'Users', 'Connections'].map((x) => h('th', { text: x })))),
      h('tbody', {}, rooms.map((r) => h('tr', { dataset: { room: r.room } },
        h('td', {}, h('button', { type: 'button', class: 'btn ghost small', text: r.room, onclick: () => showRoom(r.room) })),
        h('td', { text: String(r.users) }),
        h('td', { text: String(r.connections) }),
      ))));
    result(out, 'ok', `${rooms.length}${res.cursor ? '+' : ''} room${rooms.length === 1 ? '' : 's'} with presence`, table);
  } catch (err) {
    result(out, 'error', errorText(err));
    if (err.status === 401) showError(err);
  }
});

/** Shows who is in a room: its presence, connection by connection. */
async function showRoom(room) {
  const out = $('rooms-result');
  try {
    const p = await api.roomPresence(room);
    const clients = Array.isArray(p?.clients) ? p.clients : [];
    const table = h('table', { class: 'conns' },
      h('thead', {}, h('tr', {}, ['User', 'Connection', 'Node', 'Device'].map((x) => h('th', { text: x })))),
      h('tbody', {}, clients.map((c) => h('tr', { dataset: { user: c.user } },
        h('td', { text: c.user }), h('td', { text: c.conn_id }), h('td', { text: c.node }), h('td', { text: c.device ?? '' }),
      ))));
    result(out, 'ok', `${room} · ${p.users} user${p.users === 1 ? '' : 's'}, ${p.connections} connection${p.connections === 1 ? '' : 's'} present`, table);
  } catch (err) {
    result(out, 'error', errorText(err));
    if (err.status === 401) showError(err);
  }
}

// ---- helpers -----------------------------------------------------------------

function result(el, kind, title, body) {
  el.className = `result ${kind}`;
  replace(el, h('div', { class: 'title' }, title), body);
}

function dl(rows) {
  return h('dl', {}, rows.flatMap(([k, v]) => [h('dt', { text: k }), h('dd', { text: v })]));
}

function errorText(err) {
  if (err instanceof ApiError) {
    if (err.status === 0) return `Gateway unreachable: ${err.message}`;
    return `${err.status} ${err.code}: ${err.message}`;
  }
  return String(err?.message ?? err);
}

// ---- start -------------------------------------------------------------------

$('sum-origin').textContent = location.host;
$('sum-origin').title = location.origin;
setKeyState('unknown');
refresh();
