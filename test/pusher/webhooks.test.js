// Pusher-format webhooks of two nodes (WSGATE_PUSHER_WEBHOOK_URL, set by
// pusher_test.go), checked as an application checks Pusher's: with the
// `pusher` server library's webhook().
import test from 'node:test';
import assert from 'node:assert/strict';
import PusherServer from 'pusher';
import { app, authServer, client, portOf, server, webhooks } from './lib.js';

test('webhooks: valid for the pusher library\'s webhook(), with occupied, member, client and vacated events', async (t) => {
  const lib = server('n1');
  const forger = new PusherServer({ appId: app.appId, key: app.key, secret: 'not-the-secret-0123456789abcdef' });
  const events = [];
  let seen = 0;
  const until = async (what, pred) => {
    const end = Date.now() + 15000;
    while (!pred(events)) {
      if (Date.now() > end) throw new Error(`no webhook ${what} within 15s; got ${JSON.stringify(events)}`);
      for (const r of await webhooks(seen)) {
        seen++;
        const wh = lib.webhook({ headers: r.headers, rawBody: r.body });
        assert.ok(wh.isValid(), `webhook not valid for the library: ${JSON.stringify(r)}`);
        assert.equal(forger.webhook({ headers: r.headers, rawBody: r.body }).isValid(), false, 'valid with another secret');
        assert.ok(wh.getTime() instanceof Date);
        events.push(...wh.getEvents());
      }
    }
  };
  const has = (e) => (list) => list.some((x) => Object.entries(e).every(([k, v]) => x[k] === v));

  const auth = await authServer(t);
  const ann = client(t, portOf('n1'), auth, 'ann');
  const bob = client(t, portOf('n2'), auth, 'bob');
  const ch = 'presence-hooked';
  const { ch: annCh } = await ann.subscribe(ch);
  const { ch: bobCh } = await bob.subscribe(ch);
  await until('channel_occupied and two member_added', (l) => has({ name: 'channel_occupied', channel: ch })(l)
    && has({ name: 'member_added', channel: ch, user_id: 'ann' })(l) && has({ name: 'member_added', channel: ch, user_id: 'bob' })(l));

  const got = ann.next(annCh, 'client-wave');
  bobCh.trigger('client-wave', { n: 1 });
  await got;
  await until('client_event', has({ name: 'client_event', channel: ch, event: 'client-wave', socket_id: bob.p.connection.socket_id, user_id: 'bob' }));
  const ce = events.find((e) => e.name === 'client_event');
  assert.deepEqual(JSON.parse(ce.data), { n: 1 }, 'client_event data is the event\'s data as a JSON string');

  bob.p.disconnect();
  await until('member_removed bob', has({ name: 'member_removed', channel: ch, user_id: 'bob' }));
  ann.p.disconnect();
  await until('channel_vacated', has({ name: 'channel_vacated', channel: ch }));
  assert.deepEqual(events.map((e) => `${e.name} ${e.user_id ?? ''}`.trim()).filter((s) => !s.startsWith('client_event')).sort(),
    ['channel_occupied', 'channel_vacated', 'member_added ann', 'member_added bob', 'member_removed ann', 'member_removed bob']);
});
