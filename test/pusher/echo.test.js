// Laravel Echo over pusher-js, as a Laravel front end uses it, on two
// wsgate nodes; the server side is the `pusher` library, as Laravel's
// pusher broadcaster.
import test from 'node:test';
import assert from 'node:assert/strict';
import Echo from 'laravel-echo';
import PusherJS from 'pusher-js';
import { authServer, clientOptions, deferred, portOf, server } from './lib.js';

function echo(t, port, auth, user) {
  const e = new Echo({ broadcaster: 'pusher', key: process.env.PUSHER_KEY, Pusher: PusherJS, ...clientOptions(port, auth, user) });
  t.after(() => e.disconnect());
  return e;
}

test('Laravel Echo: channel().listen(), private(), join().here().joining().leaving(), whispers', async (t) => {
  const auth = await authServer(t);
  const alice = echo(t, portOf('n1'), auth, 'alice');
  const bob = echo(t, portOf('n2'), auth, 'bob');
  const api = server('n2');

  // A public channel and a Laravel event class name (App\Events\...).
  const subscribed = deferred('orders subscribed');
  const shipped = deferred('OrderShipped');
  alice.channel('orders').subscribed(() => subscribed.resolve()).listen('OrderShipped', (e) => shipped.resolve(e));
  await subscribed.promise;
  await api.trigger('orders', 'App\\Events\\OrderShipped', { order: { id: 1 } });
  assert.deepEqual(await shipped.promise, { order: { id: 1 } });

  // A private channel, an event with a custom name (leading dot).
  const privOK = deferred('private-orders.7 subscribed');
  const status = deferred('status.updated');
  alice.private('orders.7').subscribed(() => privOK.resolve()).listen('.status.updated', (e) => status.resolve(e));
  await privOK.promise;
  await api.trigger('private-orders.7', 'status.updated', { status: 'shipped' });
  assert.deepEqual(await status.promise, { status: 'shipped' });

  // A presence channel across the two nodes.
  const aliceHere = deferred('alice here');
  const joining = deferred('alice sees bob joining');
  const leaving = deferred('alice sees bob leaving');
  const whisper = deferred('alice hears bob whisper');
  alice.join('chat.1')
    .here((users) => aliceHere.resolve(users))
    .joining((u) => joining.resolve(u))
    .leaving((u) => leaving.resolve(u))
    .listenForWhisper('typing', (e) => whisper.resolve(e));
  assert.deepEqual(await aliceHere.promise, [{ name: 'ALICE' }]);
  const bobHere = deferred('bob here');
  const bobChat = bob.join('chat.1').here((users) => bobHere.resolve(users));
  const users = await bobHere.promise;
  assert.deepEqual(users.map((u) => u.name).sort(), ['ALICE', 'BOB']);
  assert.deepEqual(await joining.promise, { name: 'BOB' });
  bobChat.whisper('typing', { typing: true });
  assert.deepEqual(await whisper.promise, { typing: true });
  bob.leave('chat.1');
  assert.deepEqual(await leaving.promise, { name: 'BOB' });
});
