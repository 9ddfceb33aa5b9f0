// The edge component (SPEC §11) under `jco serve`, a wasi:http host in Node.js, in
// front of the real origin binary: the same bytes as the origin for export and plan,
// the origin's refusals, 501 for apply, 503 when the origin is down.

import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { mkdtemp, rm } from 'node:fs/promises';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { after, before, test } from 'node:test';

import { FLEET_BIN, REPO, estate, startServer } from './support.mjs';

/** Built by `cargo build` next to the binary (host/build.rs). */
const EDGE_WASM = resolve(REPO, process.env.FLEET_EDGE_WASM ?? join(dirname(FLEET_BIN), 'fleet-edge.wasm'));
const JCO = join(REPO, 'console/node_modules/.bin/jco');

/** A loopback port nothing listens on (for a moment). */
async function freePort() {
  const server = createServer();
  await new Promise((done) => server.listen(0, '127.0.0.1', done));
  const { port } = server.address();
  await new Promise((done) => server.close(done));
  return port;
}

/** `jco serve` of the edge with `FLEET_ORIGIN=origin`; resolves once it answers /healthz. */
async function serveEdge(origin) {
  const port = await freePort();
  // A process group of its own: jco runs the server in a child process, and stopping
  // must stop both.
  // jco transpiles into a temp dir it removes only on a clean exit: one of ours, which
  // stopping removes.
  const scratch = await mkdtemp(join(tmpdir(), 'fleet-jco-'));
  const child = spawn(JCO, ['serve', EDGE_WASM, '--port', String(port), '--host', '127.0.0.1'], {
    env: { ...process.env, FLEET_ORIGIN: origin, TMPDIR: scratch },
    stdio: ['ignore', 'ignore', 'inherit'],
    detached: true,
  });
  const base = `http://127.0.0.1:${port}`;
  const deadline = Date.now() + 120_000;
  for (;;) {
    if (child.exitCode !== null) throw new Error(`jco serve exited with ${child.exitCode}`);
    try {
      const response = await fetch(`${base}/healthz`);
      if (response.status === 200) break;
    } catch {
      // not listening yet
    }
    if (Date.now() > deadline) throw new Error('jco serve did not start within 2 minutes');
    await new Promise((done) => setTimeout(done, 250));
  }
  return {
    base,
    stop: async () => {
      const exited = new Promise((done) => (child.exitCode !== null ? done() : child.once('exit', done)));
      try {
        process.kill(-child.pid, 'SIGTERM');
      } catch {
        // already gone
      }
      await exited;
      await rm(scratch, { recursive: true, force: true });
    },
  };
}

// Every request names itself alike at the edge and at the origin: their answers are the
// same bytes only when they name the request alike (SPEC §2's request id).
const REQUEST_ID = 'edge-under-jco/1';

async function post(base, path, token, body) {
  const headers = { 'X-Request-Id': REQUEST_ID, ...(token ? { Authorization: `Bearer ${token}` } : {}) };
  const response = await fetch(`${base}${path}`, { method: 'POST', headers, body });
  assert.equal(response.headers.get('x-request-id'), REQUEST_ID, `${base}${path}`);
  return { status: response.status, text: await response.text() };
}

let origin;
let edge;
let token;

before(async () => {
  origin = await startServer();
  token = origin.tenantWithToken('acme');
  await origin.ok(token, 'fleet/apply', { document: estate() });
  edge = await serveEdge(origin.base);
});

after(async () => {
  await edge?.stop();
  await origin?.stop();
});

test('export and plan under jco serve are the origin\'s bytes', async () => {
  const changed = estate();
  changed.pools['gpu-a'].gpus = 96;
  const requests = [
    ['/api/compute/fleet/export', ''],
    ['/api/compute/fleet/plan', JSON.stringify({ document: changed })],
    ['/api/compute/fleet/plan', JSON.stringify({ document: {}, prune: true })],
    ['/api/compute/fleet/plan', JSON.stringify({ document: { pools: { Bad: {} } } })],
  ];
  for (const [path, body] of requests) {
    const atOrigin = await post(origin.base, path, token, body);
    const atEdge = await post(edge.base, path, token, body);
    assert.deepEqual(atEdge, atOrigin, `${path} ${body}`);
  }
});

test('the origin refuses tokens for the edge, and the edge never applies', async () => {
  const body = JSON.stringify({ document: estate() });
  for (const refused of ['no-such-token', undefined]) {
    const atOrigin = await post(origin.base, '/api/compute/fleet/plan', refused, body);
    const atEdge = await post(edge.base, '/api/compute/fleet/plan', refused, body);
    assert.equal(atOrigin.status, 401);
    assert.deepEqual(atEdge, atOrigin);
  }
  const applied = await post(edge.base, '/api/compute/fleet/apply', token, body);
  assert.equal(applied.status, 501);
  assert.equal(JSON.parse(applied.text).error.code, 'UNSUPPORTED');
});

test('an origin that is down is UNAVAILABLE, and the edge serves on', async () => {
  const orphan = await serveEdge(`http://127.0.0.1:${await freePort()}`);
  try {
    const answer = await post(orphan.base, '/api/compute/fleet/plan', token, '{"document": {}}');
    assert.equal(answer.status, 503);
    assert.equal(JSON.parse(answer.text).error.code, 'UNAVAILABLE');
    assert.equal((await fetch(`${orphan.base}/healthz`)).status, 200);
  } finally {
    await orphan.stop();
  }
});
