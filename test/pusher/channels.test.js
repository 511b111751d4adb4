// pusher-js (its Node build) on two wsgate nodes sharing Redis, and the
// `pusher` server library publishing through the Pusher HTTP API.
import test from 'node:test';
import assert from 'node:assert/strict';
import { authServer, client, eventually, server, portOf } from './lib.js';

test('public channels: trigger, triggerBatch and socket_id exclusion reach pusher-js on both nodes; get channels', async (t) => {
  const auth = await authServer(t);
  const a = client(t, portOf('n1'), auth, 'ann');
  const b = client(t, portOf('n2'), auth, 'bob');
  const { ch: aOrders } = await a.subscribe('orders');
  const { ch: bOrders } = await b.subscribe('orders');
  const { ch: bNews } = await b.subscribe('news');
  const api1 = server('n1');
  const api2 = server('n2');

  // trigger through n2 reaches the subscribers on n1 and n2; data as sent.
  const gotA = a.next(aOrders, 'created');
  const gotB = b.next(bOrders, 'created');
  const res = await api2.trigger('orders', 'created', { id: 7, item: 'tea' });
  assert.equal(res.status, 200);
  assert.deepEqual((await gotA).data, { id: 7, item: 'tea' });
  assert.deepEqual((await gotB).data, { id: 7, item: 'tea' });

  // triggerBatch: each event to its channel.
  const batchA = a.next(aOrders, 'shipped');
  const batchB = b.next(bNews, 'headline');
  const bres = await api1.triggerBatch([
    { channel: 'orders', name: 'shipped', data: { id: 7 } },
    { channel: 'news', name: 'headline', data: 'wsgate speaks Pusher' },
  ]);
  assert.equal(bres.status, 200);
  assert.deepEqual((await batchA).data, { id: 7 });
  assert.equal((await batchB).data, 'wsgate speaks Pusher');

  // socket_id excludes the sender's own connection: bob gets the event,
  // ann only the one triggered after it through the same node.
  const excludedB = b.next(bOrders, 'edited');
  await api1.trigger('orders', 'edited', { by: 'ann' }, { socket_id: a.p.connection.socket_id });
  assert.deepEqual((await excludedB).data, { by: 'ann' });
  const barrier = a.next(aOrders, 'barrier');
  await api1.trigger('orders', 'barrier', {});
  await barrier;
  assert.equal(a.seen.events.filter((e) => e.event === 'edited').length, 0, 'the excluded socket got the event');

  // get channels: both channels are occupied, seen from either node.
  for (const api of [api1, api2]) {
    const r = await api.get({ path: '/channels' });
    assert.equal(r.status, 200);
    const body = await r.json();
    assert.deepEqual(Object.keys(body.channels).sort(), ['news', 'orders']);
  }
  const one = await api1.get({ path: '/channels/orders', params: { info: 'subscription_count' } });
  const info = await one.json();
  assert.equal(info.occupied, true);
  assert.equal(info.subscription_count, 2);
});

test('private and presence channels through the auth endpoint: client events, members across nodes', async (t) => {
  const auth = await authServer(t);
  const ann = client(t, portOf('n1'), auth, 'ann');
  const bob = client(t, portOf('n2'), auth, 'bob');

  // A private channel: signed by the app's endpoint for each socket.
  const { ch: annPriv } = await ann.subscribe('private-deal.9');
  const { ch: bobPriv } = await bob.subscribe('private-deal.9');
  assert.ok(auth.calls.some((c) => c.channel === 'private-deal.9' && c.socketId === ann.p.connection.socket_id));
  // A client event reaches the other subscriber, on the other node, and is
  // not echoed to its sender.
  const typing = bob.next(bobPriv, 'client-typing');
  assert.ok(annPriv.trigger('client-typing', { text: 'hi' }));
  assert.deepEqual((await typing).data, { text: 'hi' });
  const barrier = ann.next(annPriv, 'barrier');
  await server('n1').trigger('private-deal.9', 'barrier', {});
  await barrier;
  assert.equal(ann.seen.events.filter((e) => e.event === 'client-typing').length, 0, 'the client event came back to its sender');

  // A forged signature is refused with pusher:error 4009.
  const mallory = client(t, portOf('n1'), auth, 'mallory');
  mallory.p.subscribe('private-deal.9');
  await mallory.until('pusher:error 4009', (s) => s.events.some((e) => e.event === 'pusher:error' && e.data?.code === 4009));

  // Presence: the member lists across nodes, member_added / removed with
  // the user_info the endpoint signed, client events carrying user_id.
  const { ch: annRoom, members: m1 } = await ann.subscribe('presence-room.1');
  assert.equal(m1.count, 1);
  assert.deepEqual(m1.me, { id: 'ann', info: { name: 'ANN' } });
  const added = ann.next(annRoom, 'pusher:member_added');
  const { ch: bobRoom, members: m2 } = await bob.subscribe('presence-room.1');
  assert.equal(m2.count, 2);
  const ids = [];
  m2.each((m) => ids.push(m.id));
  assert.deepEqual(ids.sort(), ['ann', 'bob']);
  assert.deepEqual(m2.get('ann').info, { name: 'ANN' });
  assert.deepEqual((await added).data, { id: 'bob', info: { name: 'BOB' } });
  assert.equal(annRoom.members.count, 2);

  const whisper = bob.next(bobRoom, 'client-wave');
  annRoom.trigger('client-wave', { n: 1 });
  const w = await whisper;
  assert.deepEqual(w.data, { n: 1 });
  assert.equal(w.meta?.user_id, 'ann', 'the sender of a client event on a presence channel');

  // The HTTP API's users and user_count, from the other node.
  const users = await (await server('n2').get({ path: '/channels/presence-room.1/users' })).json();
  assert.deepEqual(users.users.map((u) => u.id).sort(), ['ann', 'bob']);
  const pc = await (await server('n2').get({ path: '/channels', params: { filter_by_prefix: 'presence-', info: 'user_count' } })).json();
  assert.deepEqual(pc.channels, { 'presence-room.1': { user_count: 2 } });

  // A second socket of bob is no new member; bob leaves when his last goes.
  const bob2 = client(t, portOf('n1'), auth, 'bob');
  const { members: m3 } = await bob2.subscribe('presence-room.1');
  assert.equal(m3.count, 2);
  bob.p.disconnect();
  await eventually('bob\'s first socket out of the channel', async () => {
    const r = await (await server('n1').get({ path: '/channels/presence-room.1', params: { info: 'subscription_count' } })).json();
    return r.subscription_count === 2;
  });
  const removed = ann.next(annRoom, 'pusher:member_removed');
  bob2.p.disconnect();
  assert.deepEqual((await removed).data, { id: 'bob', info: { name: 'BOB' } });
  assert.equal(annRoom.members.count, 1);
  const frames = (event) => ann.seen.events.filter((e) => e.event === event && e.channel === 'presence-room.1');
  assert.equal(frames('pusher_internal:member_added').length, 1, 'bob was added once for two sockets');
  assert.equal(frames('pusher_internal:member_removed').length, 1, 'bob was removed once, when his last socket left');
});
