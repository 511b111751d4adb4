// pusher-js behind a balancer in front of two nodes: a node killed with
// SIGKILL, then a node drained. pusher_test.go's balancer sends new
// connections to the first node of its pool; ctl takes a node out of the
// pool before killing or draining it, as health checks would.
import test from 'node:test';
import assert from 'node:assert/strict';
import { authServer, client, ctl, eventually, lbPort, server } from './lib.js';

const errCode = (e) => e?.data?.code ?? e?.error?.data?.code;

test('SIGKILL of a node, then a drain: pusher-js reconnects to the other node, subscribes again, and gets what is published after', async (t) => {
  const auth = await authServer(t);
  const carol = client(t, lbPort, auth, 'carol');
  const { ch: feed } = await carol.subscribe('feed');
  await carol.subscribe('presence-ops');
  const succeeded = (ch) => carol.seen.events.filter((e) => e.event === 'pusher_internal:subscription_succeeded' && e.channel === ch).length;
  const first = carol.p.connection.socket_id;
  // pusher-js notes each reconnection it schedules in its timeline:
  // {action: 'retry', delay} (0 for a close code of 4200-4299, 1000 for a
  // connection lost; a 4200 close schedules both, the first wins).
  const retries = () => carol.p.timeline.events.filter((e) => e.action === 'retry').map((e) => e.delay);
  const api1 = server('n1');
  const delivered = async (api, event) => {
    const got = carol.next(feed, event);
    await api.trigger('feed', event, { event });
    assert.deepEqual((await got).data, { event });
  };
  await delivered(api1, 'before');
  // Exactly carol's one socket is in the presence channel (asked of node api).
  const alone = (api) => eventually('carol alone in presence-ops', async () => {
    const users = await (await api.get({ path: '/channels/presence-ops/users' })).json();
    const info = await (await api.get({ path: '/channels/presence-ops', params: { info: 'user_count,subscription_count' } })).json();
    return users.users.length === 1 && users.users[0].id === 'carol' && info.user_count === 1 && info.subscription_count === 1;
  });

  // SIGKILL n1: the socket drops without a close frame; pusher-js waits
  // its 1 s for a lost connection, connects through the balancer to n2
  // and subscribes to both channels again (a new auth for the new socket).
  await ctl('kill', 'n1');
  await carol.until('resubscribed after the kill', () => succeeded('feed') === 2 && succeeded('presence-ops') === 2);
  const second = carol.p.connection.socket_id;
  assert.notEqual(second, first, 'a new socket');
  assert.deepEqual(retries(), [1000], 'a lost connection is retried after pusher-js\'s backoff');
  assert.ok(auth.calls.some((c) => c.channel === 'presence-ops' && c.socketId === second), 'presence-ops authorized again for the new socket');
  const api2 = server('n2');
  await delivered(api2, 'after-kill');
  // The killed node's subscription is gone within three heartbeats.
  await alone(api2);

  // n1 back, first in the pool; drain n2: its close code (4200) makes
  // pusher-js reconnect at once (no backoff), to n1.
  await ctl('start', 'n1');
  await ctl('drain', 'n2');
  await carol.until('the drain\'s close code 4200', (s) => s.errors.some((e) => errCode(e) === 4200));
  await carol.until('resubscribed after the drain', () => succeeded('feed') === 3 && succeeded('presence-ops') === 3);
  assert.deepEqual(retries(), [1000, 0, 1000], 'the drain\'s close code made pusher-js reconnect at once');
  assert.notEqual(carol.p.connection.socket_id, second);
  await delivered(server('n1'), 'after-drain');
  await alone(server('n1'));
});
