// Shared by the browser tests: paths, the real `fleet` binary on a loopback port with a
// temp database, headless Chromium signed in to the console, and the transpiled planner
// loaded in Node.js.

import { spawn, execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { createRequire } from 'node:module';

export const REPO = resolve(dirname(fileURLToPath(import.meta.url)), '../..');
export const FLEET_BIN = resolve(REPO, process.env.FLEET_BIN ?? 'target/debug/fleet');
/** Where the build (`console/build.sh`) wrote the transpiled component: beside the binary. */
export const CONSOLE_DIR = resolve(REPO, process.env.FLEET_CONSOLE_DIR ?? join(dirname(FLEET_BIN), 'console'));
/** Screenshots and other by-products of a test run (gitignored). */
export const ARTIFACTS = resolve(REPO, process.env.FLEET_ARTIFACTS ?? 'target/artifacts');
export const ALL = 'compute:*:* @ *';

/** A fresh temp directory, removed when the process exits. */
export function tempDir(prefix) {
  const dir = mkdtempSync(join(tmpdir(), prefix));
  process.on('exit', () => rmSync(dir, { recursive: true, force: true }));
  return dir;
}

/** `fleet serve` on 127.0.0.1:0 with a temp database; resolves once it listens. */
export async function startServer(flags = []) {
  const dir = tempDir('fleet-browser-');
  const db = join(dir, 'fleet.db');
  const child = spawn(FLEET_BIN, ['--db', db, 'serve', '--listen', '127.0.0.1:0', ...flags], {
    env: { ...process.env, RUST_LOG: 'fleet=warn' },
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  const banner = [];
  const lines = createInterface({ input: child.stdout });
  const base = await new Promise((resolveBase, reject) => {
    child.once('exit', (code) => reject(new Error(`fleet serve exited with ${code} before listening`)));
    lines.on('line', (line) => {
      const address = line.startsWith('fleet listening on ') && line.slice('fleet listening on '.length).trim();
      if (address) resolveBase(address);
      else banner.push(line);
    });
  });
  const server = {
    base,
    banner,
    db,
    admin: (...args) => execFileSync(FLEET_BIN, ['--db', db, 'admin', ...args], { encoding: 'utf8' }),
    /** A new tenant and a token for `principal` with `grants`. */
    tenantWithToken(tenant, principal = 'alice', grants = [ALL]) {
      server.admin('tenant', 'create', tenant);
      const output = server.admin('token', 'create', '--tenant', tenant, '--principal', principal,
        ...grants.flatMap((grant) => ['--grant', grant]));
      return output.trim().split('\n').at(-1).trim();
    },
    /** POSTs `body` (text or a value) to `compute.<method>`; returns status, text and JSON. */
    async call(token, method, body) {
      const response = await fetch(`${base}/api/compute/${method}`, {
        method: 'POST',
        headers: { Authorization: `Bearer ${token}` },
        body: typeof body === 'string' ? body : JSON.stringify(body ?? {}),
      });
      const text = await response.text();
      return { status: response.status, text, json: JSON.parse(text) };
    },
    async ok(token, method, body) {
      const answer = await server.call(token, method, body);
      if (answer.status !== 200) throw new Error(`${method} answered ${answer.status}: ${answer.text}`);
      return answer.json;
    },
    stop() {
      child.kill('SIGTERM');
      return new Promise((done) => (child.exitCode !== null ? done() : child.once('exit', done)));
    },
  };
  return server;
}

// playwright-core is installed with the page's tooling, in console/node_modules.
const { chromium } = createRequire(join(REPO, 'console/package.json'))('playwright-core');
const CHROMIUM = process.env.CHROMIUM ?? '/usr/bin/chromium';
const ARGS = [
  '--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
  '--disable-background-networking', '--disable-component-update', '--disable-sync',
];

/** Debian's Chromium, headless, with a fresh profile (playwright passes it as --user-data-dir). */
export function launchBrowser() {
  return chromium.launchPersistentContext(tempDir('fleet-chromium-'), {
    executablePath: CHROMIUM,
    headless: true,
    args: ARGS,
    viewport: { width: 1400, height: 1000 },
  });
}

/**
 * Closes every page of `browser`: each holds an event stream, and Chromium opens at most
 * six connections to one server, so pages left open would starve the next test's.
 */
export async function closePages(browser) {
  for (const page of browser?.pages() ?? []) await page.close();
}

/** axe-core's one-file build, from the page's npm packages (nothing loads from a CDN). */
const AXE = join(REPO, 'console/node_modules/axe-core/axe.min.js');

/** The serious and critical violations axe-core finds in the page as it is now. */
export async function violations(page) {
  // Evaluated by the test (as DevTools would), since the page's own CSP admits no inline script.
  if (!(await page.evaluate(() => 'axe' in window))) await page.evaluate(readFileSync(AXE, 'utf8'));
  const results = await page.evaluate(() => window.axe.run(document, { resultTypes: ['violations'] }));
  return results.violations
    .filter((violation) => ['serious', 'critical'].includes(violation.impact))
    .map((violation) => `${violation.id}: ${violation.help} (${violation.nodes.map((node) => node.target.join(' ')).join(', ')})`);
}

/**
 * A new page of `browser` signed in to the console of `server` with `token`, at `view`
 * (`#plan` waits for the first plan too). `problems` collects page errors, console
 * errors and any request whose URL carries the token.
 */
export async function signIn(browser, server, token, view = '#status') {
  const page = await browser.newPage();
  const problems = [];
  page.on('request', (request) => request.url().includes(token) && problems.push(`token in a URL: ${request.url()}`));
  page.on('pageerror', (error) => problems.push(`page error: ${error.message}`));
  page.on('console', (message) => message.type() === 'error' && problems.push(`console: ${message.text()}`));
  await page.goto(`${server.base}/console${view}`);
  await page.fill('#token', token);
  await page.click('#sign-in button[type=submit]');
  await page.locator('#who', { hasText: 'tenant ' }).waitFor();
  if (view === '#plan') await page.locator('#plan-hash', { hasText: 'sha256:' }).waitFor();
  return { page, problems };
}

/** The transpiled component, with core modules compiled from CONSOLE_DIR. */
export async function componentInNode() {
  const module = await import(join(CONSOLE_DIR, 'fleet_planner.js'));
  const compiled = new Map();
  const getCoreModule = (name) => {
    if (!compiled.has(name)) compiled.set(name, WebAssembly.compile(readFileSync(join(CONSOLE_DIR, name))));
    return compiled.get(name);
  };
  return { module, getCoreModule };
}

/** A small estate: two sites, an account, two pools, a quota, an offer and a flavor. */
export function estate() {
  return {
    sites: {
      'eu-west': { region: 'eu-west-1', description: 'Dublin', labels: { tier: 'prod' } },
      lab: { region: 'eu-central-1', labels: { tier: 'dev' } },
    },
    providerAccounts: { 'aws-main': { provider: 'aws', credentialsRef: 'vault:aws/main' } },
    pools: {
      'gpu-a': { site: 'eu-west', account: 'aws-main', class: 'gpu', owner: 'team-ml', vcpus: 512,
        memoryMib: 2097152, gpus: 64, labels: { accelerator: 'h100' } },
      'cpu-a': { site: 'eu-west', account: 'aws-main', class: 'cpu', owner: 'team-web', vcpus: 2048,
        memoryMib: 8388608 },
    },
    ownerQuotas: { 'team-ml': { vcpus: 256, memoryMib: 1048576, gpus: 32, instances: 100 } },
    offers: { 'ml-to-research': { pool: 'gpu-a', to: 'team-research', vcpus: 64, gpus: 8 } },
    flavors: { 'g1-large': { pool: 'gpu-a', vcpus: 8, memoryMib: 65536, gpus: 1, diskGib: 100 } },
  };
}
