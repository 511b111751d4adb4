// A typed use of @wsgate/client: `tsc --noEmit -p example` checks it.
import { Client, CloseCode, WsgateError, closeAction, type Message, type Welcome, type GapDetail, type Transport } from '@wsgate/client';

interface Chat { text: string }

const client = new Client({
  allocator: 'https://gw.example.com',
  token: async () => (await fetch('/token')).text(),
  shared: true,
  device: 'laptop-1',
  roomSince: { lobby: 41 },
  api: 'https://gw.example.com',
  transports: ['websocket', 'sse', 'stream'],
  queueLimit: 50,
});
client.on('open', (o) => {
  const t: Transport = o.transport;
  console.log('open over', t, o.conn_id, o.node, client.transport);
});
client.on('message', (m: Message) => {
  const chat = m.data as Chat;
  const seq: number | undefined = m.seq;
  console.log(m.target.type, m.target.id, m.from ?? 'api', seq, chat.text);
});
const offSay = client.on<Chat>('chat.say', (m) => console.log(m.target.id, m.data.text));
client.on('chat.typing', (m) => console.log(m.event, m.from));
offSay();
client.on('gap', (g: GapDetail) => console.log(g.target?.id ?? 'inbox', g.from, g.to, g.missed));
client.on('expiring', (e) => console.log('expires at', e.exp));
client.on('refresh', (r) => console.log(r.ok, r.exp, r.code));
client.on('state', (s) => console.log(s.state, s.previous, s.node, s.delay));
client.on('close', (c) => console.log(c.code === CloseCode.DRAINING, closeAction(c.code), c.transport ?? 'same transport'));

async function main(): Promise<void> {
  const w: Welcome = await client.connect();
  console.log(w.node, w.device, w.rooms?.lobby, w.transport, client.device, client.rooms, client.shared);
  await client.join('lobby', { since: 0 });
  const h = await client.history('lobby', { since: 0, limit: 50 });
  console.log(h.seq, h.messages.length);
  await client.publish('room:lobby', 'chat', { text: 'hi' });
  await client.publish({ type: 'user', id: 'bob' }, 'chat', { text: 'hi' });
  await client.send('order', { n: 1 });
  const sum = await client.rpc<number>('sum', [1, 2]);
  console.log(sum + 1, await client.ping(), client.stats.refreshes);
  await client.refresh();
  try {
    await client.leave('lobby');
  } catch (err) {
    if (err instanceof WsgateError) console.log(err.code, err.closeCode);
  }
  await client.close();
}
void main();
