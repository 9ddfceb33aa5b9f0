// One binary (SPEC §19): `fleet serve --demo` started in an empty folder, as a user who
// installed it with `cargo install --path host --locked` would, serves its health check
// and the console from what the binary carries: the page loads, signs in with the
// printed token and plans in Chromium. CI runs it against the installed binary
// (FLEET_BIN); the suite against the debug build.

import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { createInterface } from 'node:readline';
import { after, before, test } from 'node:test';

import { FLEET_BIN, closePages, launchBrowser, signIn, tempDir } from './support.mjs';

let child;
let base;
let token;
const banner = [];

before(async () => {
  const empty = tempDir('fleet-smoke-');
  // Nothing from the build tree: the console comes from the binary.
  const env = { ...process.env, RUST_LOG: 'fleet=warn', FLEET_CACHE_DIR: empty };
  delete env.FLEET_CONSOLE_DIR;
  child = spawn(FLEET_BIN, ['serve', '--demo', '--listen', '127.0.0.1:0'], {
    cwd: empty,
    env,
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  base = await new Promise((resolve, reject) => {
    child.once('exit', (code) => reject(new Error(`fleet serve exited with ${code} before listening`)));
    createInterface({ input: child.stdout }).on('line', (line) => {
      if (line.startsWith('fleet listening on ')) resolve(line.slice('fleet listening on '.length).trim());
      else banner.push(line);
    });
  });
  token = banner.find((line) => line.includes('export FLEET_TOKEN='))?.split('=').at(-1);
});

after(async () => {
  child?.kill('SIGTERM');
});

test('serve --demo in an empty folder answers its health check and names its console', async () => {
  const health = await fetch(`${base}/healthz`);
  assert.equal(health.status, 200);
  assert.ok(token, banner.join('\n'));
  assert.ok(banner.some((line) => line === `console: ${base}/console (sign in with a token)`), banner.join('\n'));
});

test('the console assets come from the binary, with their hashes as ETags', async () => {
  const planner = await fetch(`${base}/console/assets/fleet_planner.js`);
  assert.equal(planner.status, 200);
  const etag = planner.headers.get('etag');
  assert.match(etag, /^"[0-9a-f]{32}"$/);
  const again = await fetch(`${base}/console/assets/fleet_planner.js`, { headers: { 'If-None-Match': etag } });
  assert.equal(again.status, 304);
  assert.equal(again.headers.get('etag'), etag);
  const page = await fetch(`${base}/console`);
  assert.equal(page.status, 200);
  assert.match(page.headers.get('etag'), /^"[0-9a-f]{32}"$/);
});

test('the console loads, signs in with the printed token and plans in Chromium', async () => {
  const browser = await launchBrowser();
  try {
    const { page, problems } = await signIn(browser, { base }, token, '#plan');
    assert.match(await page.locator('#plan-hash').textContent(), /sha256:[0-9a-f]{64}/);
    assert.deepEqual(problems, []);
  } finally {
    await closePages(browser);
    await browser.close();
  }
});
