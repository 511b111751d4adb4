// The package as `npm pack` makes it: the files it holds, and its types
// compiling in a fresh TypeScript project that installs the tarball.
import test from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, dirname } from 'node:path';
import { fileURLToPath } from 'node:url';

const pkg = join(dirname(fileURLToPath(import.meta.url)), '..');
const tsc = join(pkg, 'node_modules', 'typescript', 'bin', 'tsc');

test('npm pack holds the module, its types, README and LICENSE; the types compile in a fresh project', () => {
  const dir = mkdtempSync(join(tmpdir(), 'wsgate-pack-'));
  const [info] = JSON.parse(execFileSync('npm', ['pack', '--json', '--pack-destination', dir], { cwd: pkg, encoding: 'utf8' }));
  assert.deepEqual(info.files.map((f) => f.path).sort(), ['LICENSE', 'README.md', 'index.d.ts', 'package.json', 'wsgate.js']);
  assert.equal(info.name, '@wsgate/client');
  // The package's license is the repository's, word for word.
  assert.equal(readFileSync(join(pkg, 'LICENSE'), 'utf8'), readFileSync(join(pkg, '..', '..', 'LICENSE'), 'utf8'), 'web/client/LICENSE differs from LICENSE');

  const app = join(dir, 'app');
  execFileSync('mkdir', ['-p', app]);
  writeFileSync(join(app, 'package.json'), JSON.stringify({ name: 'app', private: true, type: 'module' }));
  execFileSync('npm', ['install', '--offline', '--no-audit', '--no-fund', '--loglevel=error', join(dir, info.filename)], { cwd: app });
  writeFileSync(join(app, 'main.ts'), [
    "import { Client, type Message } from '@wsgate/client';",
    "const c = new Client({ url: 'wss://gw.example.com/ws', shared: true, token: () => 'jwt' });",
    "c.on('message', (m: Message) => console.log(m.seq, m.target.id));",
    "c.on('gap', (g) => console.log(g.target?.id));",
    "void c.history('lobby', { since: 0 }).then((h) => h.messages.length);",
    "c.on<{ text: string }>('chat.say', (m) => console.log(m.data.text));",
    "new Client({ url: 'wss://gw.example.com/ws', queueLimit: 10 });",
    '',
  ].join('\n'));
  writeFileSync(join(app, 'tsconfig.json'), JSON.stringify({
    compilerOptions: { target: 'ES2022', module: 'NodeNext', moduleResolution: 'NodeNext', lib: ['ES2022', 'DOM'], strict: true, noEmit: true, types: [] },
    files: ['main.ts'],
  }));
  execFileSync(process.execPath, [tsc, '--noEmit', '-p', app], { cwd: app, stdio: 'inherit' });

  // And a wrong use is refused: the declarations are what is checked.
  writeFileSync(join(app, 'main.ts'), "import { Client } from '@wsgate/client';\nnew Client({ shared: 'yes' });\n");
  assert.throws(() => execFileSync(process.execPath, [tsc, '--noEmit', '-p', app], { cwd: app, stdio: 'pipe' }), 'a string for shared must not compile');
  // A client event's name is not a message event's: its listener gets the event's detail.
  writeFileSync(join(app, 'main.ts'), "import { Client, type Message } from '@wsgate/client';\nnew Client({}).on('state', (m: Message) => m.event);\n");
  assert.throws(() => execFileSync(process.execPath, [tsc, '--noEmit', '-p', app], { cwd: app, stdio: 'pipe' }), 'a message listener on state must not compile');
});
