// wsgate demo chat: rooms and direct messages on top of /client/wsgate.js.
// Everything lives in this page's memory; a reload starts a new session
// (unacknowledged reliable messages come again, acknowledged ones do not).
// A room shows its kept history (reliable room messages) on join, and its
// position resumes with room_since on reconnect.

import { Client } from '../client/wsgate.js';
import { clock, h, hhmm, replace } from './dom.js';

const $ = (id) => document.getElementById(id);
const LOBBY = 'lobby';

/** @type {Client|null} */
let client = null;
let me = '';
let lastNode = null;
let everOpen = false;
let reconnectAt = 0;
let countdown = null;
let cidSeq = 0;

/**
 * Conversations by key: `room:<name>`, `dm:<user>`, `all` (broadcasts).
 * @type {Map<string, {key: string, kind: string, name: string, items: any[], unread: number}>}
 */
const convs = new Map();
let active = `room:${LOBBY}`;
const seen = new Set(); // message ids already shown
/**
 * Who is in each room (rooms with join_leave, as wsgate dev has): conn id
 * to user, from the joined and left frames. The server tells a joining
 * connection one joined per connection already there, then the changes.
 * @type {Map<string, Map<string, string>>}
 */
const online = new Map();

// ---- sign in -----------------------------------------------------------------

const params = new URLSearchParams(location.search);
if (params.get('user')) $('name').value = params.get('user');

$('signin-form').addEventListener('change', (e) => {
  if (e.target.name !== 'mode') return;
  const token = e.target.value === 'token';
  $('mode-name').hidden = token;
  $('mode-token').hidden = !token;
  (token ? $('token') : $('name')).focus();
});

$('signin-form').addEventListener('submit', (e) => {
  e.preventDefault();
  const mode = $('signin-form').querySelector('input[name="mode"]:checked').value;
  const err = $('signin-error');
  err.textContent = '';
  if (mode === 'name') {
    const name = $('name').value.trim();
    if (!name) { err.textContent = 'Enter a name.'; $('name').focus(); return; }
    if (/[\u0000-\u001f\u007f]/.test(name)) { err.textContent = 'The name contains control characters.'; return; }
    start({ user: name });
  } else {
    const token = $('token').value.trim();
    if (!/^[\w-]+\.[\w-]+\.[\w-]*$/.test(token)) { err.textContent = 'Paste a JWT (three base64url parts separated by dots).'; $('token').focus(); return; }
    start({ token });
  }
});

function start(auth) {
  stop();
  me = auth.user ?? '';
  lastNode = null;
  everOpen = false;
  convs.clear();
  seen.clear();
  conv(`room:${LOBBY}`);
  active = `room:${LOBBY}`;
  client = new Client({ allocator: location.origin, ...auth });
  client.on('state', onState);
  client.on('welcome', onWelcome);
  client.on('message', onMessage);
  client.on('joined', (e) => { roomOnline(e.room).set(e.conn_id, e.user); renderOnline(); });
  client.on('left', (e) => { roomOnline(e.room).delete(e.conn_id); renderOnline(); });
  client.on('gap', (g) => notice(`${g.missed} reliable message${g.missed === 1 ? ' was' : 's were'} lost (seq ${g.from}–${g.to}): the inbox limit or TTL dropped them`, 'warn'));
  client.on('redirect', (r) => notice(`Node ${lastNode ?? ''} is ${r.reason || 'draining'}: moving to another node`, 'warn'));
  client.on('error', (e) => { if (e.code !== 'allocator_failed') notice(`Error ${e.code}: ${e.message}`, 'warn'); });
  $('signin').hidden = true;
  $('chat').hidden = false;
  $('signout').hidden = false;
  $('conn').hidden = false;
  $('me').textContent = me || '…';
  renderAll();
  client.connect();
  $('composer-input').focus();
}

function stop() {
  if (client) client.close();
  client = null;
  clearInterval(countdown);
  countdown = null;
}

$('signout').addEventListener('click', () => {
  stop();
  document.body.dataset.state = 'signed-out';
  $('chat').hidden = true;
  $('signin').hidden = false;
  $('signout').hidden = true;
  $('reconnect').hidden = true;
  $('conn').hidden = true;
  $('node-pill').hidden = true;
  $('node').textContent = '–';
  $('name').focus();
});

$('reconnect').addEventListener('click', () => {
  if (!client) return;
  $('reconnect').hidden = true;
  client.connect();
});

// ---- connection --------------------------------------------------------------

function onState(s) {
  document.body.dataset.state = s.state;
  clearInterval(countdown);
  countdown = null;
  const dot = $('conn-dot');
  const text = $('conn-text');
  $('reconnect').hidden = s.state !== 'closed';
  switch (s.state) {
    case 'connecting':
      dot.className = 'dot warn';
      text.textContent = 'Connecting…';
      break;
    case 'open':
      dot.className = 'dot ok';
      text.textContent = 'Connected';
      break;
    case 'reconnecting': {
      dot.className = 'dot warn';
      reconnectAt = performance.now() + (s.delay ?? 0);
      const show = () => {
        const left = Math.max(0, reconnectAt - performance.now());
        text.textContent = left > 150 ? `Reconnecting in ${(left / 1000).toFixed(1)} s` : 'Reconnecting…';
      };
      show();
      countdown = setInterval(show, 200);
      if (s.previous === 'open') {
        const why = s.code === 4001 ? 'node draining' : s.code === 1001 ? 'node shutting down' : `code ${s.code}${s.reason ? ': ' + s.reason : ''}`;
        notice(`Connection to ${lastNode ?? 'the node'} lost (${why}); reconnecting…`, 'warn');
      }
      break;
    }
    case 'closed':
      dot.className = 'dot bad';
      text.textContent = s.code && s.code !== 1000 ? `Disconnected (${s.code})` : 'Disconnected';
      if (client && s.code && s.code !== 1000) notice(`Disconnected by the server (${s.code}${s.reason ? ': ' + s.reason : ''}); not reconnecting`, 'warn');
      break;
  }
  $('node').textContent = s.state === 'open' ? client?.node ?? '–' : '–';
  $('node-pill').hidden = s.state !== 'open';
  $('session-node').textContent = $('node').textContent;
  setComposerEnabled(s.state === 'open');
}

function onWelcome(w) {
  const first = !everOpen;
  // A new connection: the server tells it who is in its rooms again.
  online.clear();
  renderOnline();
  everOpen = true;
  if (w.user && w.user !== me) me = w.user;
  $('me').textContent = me;
  $('node').textContent = w.node;
  $('session-node').textContent = w.node;
  $('session-conn').textContent = w.conn_id;
  $('session-conn').title = w.conn_id;
  $('session-reconnects').textContent = String(client?.stats.reconnects ?? 0);
  if (first) {
    notice(`Connected as ${me} to node ${w.node}`, 'ok');
    join(LOBBY, false);
  } else if (w.node !== lastNode) {
    notice(`Reconnected to node ${w.node} (was ${lastNode ?? '?'})`, 'ok');
  } else {
    notice(`Reconnected to node ${w.node}`, 'ok');
  }
  lastNode = w.node;
}

function setComposerEnabled(on) {
  $('send').disabled = !on;
  const input = $('composer-input');
  input.placeholder = on ? `Message ${title(convs.get(active))}` : 'Waiting for the connection…';
}

// ---- messages ----------------------------------------------------------------

function onMessage(m) {
  if (m.id && seen.has(m.id)) return;
  if (m.id) seen.add(m.id);
  $('session-seq').textContent = String(client?.lastSeq ?? 0);
  const data = m.data;
  // The sender is the server-set `from` (the publishing client's user id;
  // absent for API publishes), never anything inside data: a client cannot
  // post as someone else.
  const from = typeof m.from === 'string' && m.from ? m.from : '';
  let key;
  switch (m.target?.type) {
    case 'room': key = `room:${m.target.id}`; break;
    case 'user': key = `dm:${from || 'server'}`; break;
    default: key = 'all';
  }
  const c = conv(key);
  // Our own message coming back (room echo or a DM to ourselves): confirm it.
  if (from === me && data?.cid) {
    const mine = c.items.find((it) => it.cid === data.cid && it.mine);
    if (mine) {
      mine.status = 'sent';
      mine.id = m.id;
      paint(mine);
      return;
    }
  }
  add(c, {
    kind: 'msg', id: m.id, seq: m.seq, event: m.event, ts: m.ts || Date.now(),
    from: from || (m.target?.type === 'broadcast' ? 'broadcast' : 'server'),
    text: typeof data?.text === 'string' ? data.text : null,
    data, mine: from === me, status: 'sent',
  });
}

async function send(text) {
  const c = convs.get(active);
  if (!c || !client) return;
  const cid = `${Date.now().toString(36)}-${++cidSeq}`;
  const item = add(c, { kind: 'msg', from: me, text, ts: Date.now(), mine: true, status: 'pending', cid, event: c.kind === 'dm' ? 'dm' : 'chat' });
  const target = c.kind === 'room' ? { type: 'room', id: c.name } : { type: 'user', id: c.name };
  try {
    await client.publish(target, item.event, { text, cid });
    // Rooms echo the message back (matched by cid in onMessage); the reply
    // may come before or after that echo.
    if (item.status === 'pending') item.status = 'sent';
  } catch (err) {
    item.status = 'failed';
    item.error = err.code === 'forbidden' ? 'not allowed by your token' : err.message;
  }
  paint(item);
}

$('composer').addEventListener('submit', (e) => {
  e.preventDefault();
  const input = $('composer-input');
  const text = input.value.trim();
  if (!text || !client || client.state !== 'open') return;
  input.value = '';
  send(text);
});

// ---- rooms and DMs ----------------------------------------------------------

async function join(room, focus = true) {
  if (!client) return;
  try {
    // Joining with since=0 replays what the room keeps: its reliable
    // messages (published through the server API with "reliable"), shown
    // as the room's history. Chat lines sent from this page are client
    // publish frames, which are never kept (contract: not reliable).
    const history = await client.history(room, { since: 0, limit: 50 });
    for (const m of history.messages) onMessage(m);
    conv(`room:${room}`);
    if (focus) select(`room:${room}`);
    else renderSidebar();
  } catch (err) {
    notice(`Could not join ${room}: ${err.message}`, 'warn');
  }
}

$('join-form').addEventListener('submit', (e) => {
  e.preventDefault();
  const room = $('join-room').value.trim().replace(/^#/, '');
  if (!room) return;
  $('join-room').value = '';
  join(room);
});

$('dm-form').addEventListener('submit', (e) => {
  e.preventDefault();
  const user = $('dm-user').value.trim().replace(/^@/, '');
  if (!user) return;
  $('dm-user').value = '';
  conv(`dm:${user}`);
  select(`dm:${user}`);
});

$('leave').addEventListener('click', async () => {
  const c = convs.get(active);
  if (!c || c.kind !== 'room' || !client) return;
  try {
    await client.leave(c.name);
    convs.delete(c.key);
    select(convs.has(`room:${LOBBY}`) ? `room:${LOBBY}` : [...convs.keys()][0] ?? `room:${LOBBY}`);
  } catch (err) {
    notice(`Could not leave ${c.name}: ${err.message}`, 'warn');
  }
});

$('nav-toggle').addEventListener('click', () => $('chat').classList.toggle('nav-open'));

// ---- model -------------------------------------------------------------------

function conv(key) {
  let c = convs.get(key);
  if (!c) {
    const [kind, ...rest] = key.split(':');
    c = { key, kind: kind === 'all' ? 'all' : kind, name: rest.join(':') || 'everyone', items: [], unread: 0 };
    convs.set(key, c);
    renderSidebar();
  }
  return c;
}

function add(c, item) {
  c.items.push(item);
  if (c.items.length > 500) c.items.splice(0, c.items.length - 500);
  if (c.key === active) {
    appendItem(item, c.items[c.items.length - 2]);
  } else if (item.kind === 'msg') {
    c.unread++;
    renderSidebar();
  }
  return item;
}

function notice(text, tone = '') {
  const c = convs.get(active) ?? conv(`room:${LOBBY}`);
  add(c, { kind: 'notice', text, tone, ts: Date.now() });
}

function title(c) {
  if (!c) return '';
  return c.kind === 'room' ? `#${c.name}` : c.kind === 'dm' ? `@${c.name}` : 'everyone';
}

// ---- rendering ---------------------------------------------------------------

function select(key) {
  active = key;
  const c = conv(key);
  c.unread = 0;
  $('chat').classList.remove('nav-open');
  renderAll();
}

function renderAll() {
  renderSidebar();
  renderOnline();
  const c = convs.get(active);
  $('conv-title').textContent = title(c);
  $('conv-sub').textContent = c?.kind === 'room' ? 'room · everyone who joined gets its messages'
    : c?.kind === 'dm' ? `direct messages with ${c.name}` : 'broadcasts to every connection';
  $('leave').hidden = c?.kind !== 'room';
  setComposerEnabled(client?.state === 'open');
  $('composer').hidden = c?.kind === 'all';
  const list = $('messages');
  list.replaceChildren();
  let prev;
  for (const it of c?.items ?? []) { appendItem(it, prev, false); prev = it; }
  if (!c?.items.length) list.append(h('li', { class: 'empty', text: c?.kind === 'dm' ? `No messages with ${c.name} yet.` : 'No messages yet. Say hello!' }));
  list.scrollTop = list.scrollHeight;
}

function roomOnline(room) {
  let m = online.get(room);
  if (!m) { m = new Map(); online.set(room, m); }
  return m;
}

/** The users online in the active room: this client and the others it was told of. */
function renderOnline() {
  const c = convs.get(active);
  $('online-section').hidden = c?.kind !== 'room';
  if (c?.kind !== 'room') return;
  const users = new Map(); // user -> connections
  if (me && client?.state === 'open') users.set(me, 1);
  for (const u of (online.get(c.name) ?? new Map()).values()) users.set(u, (users.get(u) ?? 0) + 1);
  const names = [...users.keys()].sort((a, b) => (b === me) - (a === me) || a.localeCompare(b));
  $('online-count').textContent = String(names.length);
  replace($('online'), names.map((u) => h('li', { dataset: { user: u } },
    h('span', { class: 'dot ok' }),
    h('span', { class: 'name', text: u === me ? `${u} (you)` : u }),
    users.get(u) > 1 && h('span', { class: 'muted', text: ` ×${users.get(u)}` }))));
}

function renderSidebar() {
  const rooms = [];
  const dms = [];
  for (const c of convs.values()) (c.kind === 'dm' ? dms : rooms).push(c);
  rooms.sort((a, b) => (a.kind === 'all') - (b.kind === 'all') || a.name.localeCompare(b.name));
  dms.sort((a, b) => a.name.localeCompare(b.name));
  const item = (c) => h('li', { class: c.key === active ? 'active' : '', dataset: { conv: c.key } },
    h('button', { type: 'button', onclick: () => select(c.key) },
      h('span', { class: 'sigil', text: c.kind === 'room' ? '#' : c.kind === 'dm' ? '@' : '*' }),
      h('span', { class: 'name', text: c.name }),
      c.unread > 0 && h('span', { class: 'unread', text: c.unread > 99 ? '99+' : String(c.unread) }),
    ));
  replace($('rooms'), rooms.map(item));
  replace($('dms'), dms.length ? dms.map(item) : h('li', { class: 'muted', style: 'padding: 2px 8px; font-size: 12.5px', text: 'Nobody yet' }));
}

function appendItem(it, prev, scroll = true) {
  const list = $('messages');
  const atBottom = list.scrollHeight - list.scrollTop - list.clientHeight < 80;
  list.querySelector(':scope > .empty')?.remove();
  if (it.kind === 'notice') {
    it.el = h('li', { class: `notice ${it.tone}`, text: `${it.text} · ${clock(it.ts)}` });
  } else {
    const cont = prev?.kind === 'msg' && prev.from === it.from && it.ts - prev.ts < 5 * 60 * 1000;
    it.el = h('li', { class: `msg${cont ? ' cont' : ''}${it.mine ? ' mine' : ''}` });
    paint(it);
  }
  list.append(it.el);
  if (scroll && (atBottom || it.mine)) list.scrollTop = list.scrollHeight;
}

function paint(it) {
  if (!it.el) return;
  it.el.classList.toggle('pending', it.status === 'pending');
  it.el.classList.toggle('failed', it.status === 'failed');
  if (it.id) it.el.dataset.id = it.id;
  if (it.seq) it.el.dataset.seq = String(it.seq);
  const showEvent = it.event && !['chat', 'dm'].includes(it.event);
  const body = it.text != null ? it.text : h('code', { text: JSON.stringify(it.data, null, 1) ?? 'null' });
  replace(it.el,
    h('span', { class: 'avatar', style: `background:${color(it.from)}`, 'aria-hidden': 'true', text: (it.from[0] ?? '?').toUpperCase() }),
    h('div', { class: 'meta' },
      h('span', { class: 'from', text: it.mine ? `${it.from} (you)` : it.from }),
      h('span', { class: 'time', title: new Date(it.ts).toLocaleString(), text: hhmm(it.ts) }),
      showEvent && h('span', { class: 'tag event', text: it.event }),
      it.seq && h('span', { class: 'tag', title: 'Reliable message: kept until acknowledged, resumed after reconnects', text: `reliable #${it.seq}` }),
    ),
    h('div', { class: 'text' }, body,
      it.status === 'pending' && h('span', { class: 'status', text: ' · sending…' }),
      it.status === 'failed' && h('span', { class: 'status', text: ` · not sent: ${it.error ?? 'error'}` })),
  );
}

function color(name) {
  let x = 0;
  for (const ch of String(name)) x = (x * 31 + ch.codePointAt(0)) >>> 0;
  return `hsl(${x % 360} 55% 46%)`;
}
