// The console's Source view (SPEC §16, §20.3), in headless Chromium against the real
// binary and a git repository made with the `git` program: the source's state, commits
// and settings as the server answers them, refresh pressed in the page, the buttons only
// for a token that may call them, the view only for one that may read the source, and
// a tenant without a source told how to make one.

import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { after, afterEach, before, test } from 'node:test';

import { ARTIFACTS, closePages, estate, launchBrowser, signIn, startServer, tempDir, violations } from './support.mjs';

/** `git` without the host's configuration, with a fixed author. */
const GIT_ENV = {
  ...process.env,
  GIT_CONFIG_GLOBAL: '/dev/null',
  GIT_CONFIG_NOSYSTEM: '1',
  GIT_AUTHOR_NAME: 'Fleet Test',
  GIT_AUTHOR_EMAIL: 'test@example.com',
  GIT_COMMITTER_NAME: 'Fleet Test',
  GIT_COMMITTER_EMAIL: 'test@example.com',
};
const git = (cwd, ...args) => execFileSync('git', args, { cwd, env: GIT_ENV, encoding: 'utf8' }).trim();

let server;
let browser;
let token;
let head;

before(async () => {
  const dir = tempDir('fleet-source-');
  // A bare repository with fleet/estate.json on main, pushed from a work tree.
  const bare = join(dir, 'estate.git');
  const work = join(dir, 'work');
  git(dir, 'init', '--quiet', '--bare', '--initial-branch=main', bare);
  git(dir, 'init', '--quiet', '--initial-branch=main', work);
  mkdirSync(join(work, 'fleet'));
  writeFileSync(join(work, 'fleet', 'estate.json'), JSON.stringify(estate(), null, 2));
  git(work, 'add', 'fleet/estate.json');
  git(work, 'commit', '--quiet', '-m', 'estate');
  git(work, 'push', '--quiet', bare, 'main');
  head = git(work, 'rev-parse', 'HEAD');

  server = await startServer(['--git-allow-insecure', '--git-allow', '127.0.0.0/8', '--git-cache', join(dir, 'git-cache')]);
  token = server.tenantWithToken('acme');
  await server.ok(token, 'sources/put', { url: `file://${bare}`, mode: 'auto', path: 'fleet' });
  const { source } = await server.ok(token, 'sources/refresh', {});
  assert.equal(source.status.state, 'synced', JSON.stringify(source));
  browser = await launchBrowser();
});

afterEach(() => closePages(browser));
after(async () => {
  await browser?.close();
  await server?.stop();
});


/** Opens the Source view through the navigation and waits for its state. */
async function openSource(page) {
  await page.click('nav#views a[href="#source"]');
  await page.waitForFunction(() => document.body.dataset.view === 'source');
  await page.locator('#source-state').waitFor();
}

test('the Source view shows the state, the commits and the settings, and refresh runs a cycle', async () => {
  const { page, problems } = await signIn(browser, server, token);
  await openSource(page);
  assert.equal(await page.locator('#source-state').textContent(), 'synced');
  assert.equal(await page.locator('#source-head').textContent(), head.slice(0, 12));
  assert.equal(await page.locator('#source-head').getAttribute('title'), head);
  assert.equal(await page.locator('#source-applied').textContent(), head.slice(0, 12));
  assert.equal(await page.locator('#source-revision').textContent(), '1');
  assert.match(await page.locator('#source-url').textContent(), /^file:\/\/.*\/estate\.git$/);
  assert.match(await page.locator('#source-mode').textContent(), /^auto \(every 3m\)$/);
  assert.equal(await page.locator('#source-proposal').textContent(), '—');
  // Every action for a token that holds every grant; unpin only once pinned.
  for (const id of ['source-refresh', 'source-sync', 'source-pin']) assert.equal(await page.locator(`#${id}`).count(), 1, id);
  assert.equal(await page.locator('#source-unpin').count(), 0);
  assert.equal(await page.locator('#source-pin-commit').inputValue(), head, 'pin offers the applied commit');
  assert.deepEqual(await violations(page), []);
  mkdirSync(ARTIFACTS, { recursive: true });
  await page.screenshot({ path: join(ARTIFACTS, 'console-source.png'), fullPage: true });

  await page.click('#source-refresh');
  await page.locator('#source-outcome', { hasText: 'Refreshed: synced.' }).waitFor();
  assert.equal(await page.locator('#source-state').textContent(), 'synced');
  assert.equal(await page.locator('#source-refresh').isEnabled(), true);

  // Pinned to the applied commit (on confirmation), then unpinned.
  page.once('dialog', (dialog) => dialog.accept());
  await page.click('#source-pin');
  await page.locator('#source-outcome', { hasText: `Pinned to ${head.slice(0, 12)}` }).waitFor();
  assert.equal(await page.locator('#source-pinned').getAttribute('title'), head);
  await page.click('#source-unpin');
  await page.locator('#source-outcome', { hasText: 'Unpinned' }).waitFor();
  assert.equal(await page.locator('#source-unpin').count(), 0);
  assert.equal((await server.ok(token, 'sources/get', {})).source.pinned, undefined);
  assert.deepEqual(problems, []);
});

test('a token that may only read the source sees the view alone, without buttons', async () => {
  // The unpin above makes a cycle due: once it ran, the source is synced again.
  for (let tries = 0; (await server.ok(token, 'sources/get', {})).source.status.state !== 'synced'; tries += 1) {
    assert.ok(tries < 100, 'the source is synced again after the unpin');
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
  const reader = server.admin('token', 'create', '--tenant', 'acme', '--principal', 'rhea',
    '--grant', 'compute:sources:read @ compute-sources').trim().split('\n').at(-1).trim();
  const page = await browser.newPage();
  await page.goto(`${server.base}/console`);
  await page.fill('#token', reader);
  await page.click('#sign-in button[type=submit]');
  await page.locator('#who', { hasText: 'rhea · may read sources' }).waitFor();
  await page.waitForFunction(() => document.body.dataset.view === 'source');
  assert.deepEqual(await page.locator('nav#views a:not([hidden])').allTextContents(), ['Source']);
  await page.locator('#source-state', { hasText: 'synced' }).waitFor();
  assert.equal(await page.locator('#source-applied').textContent(), head.slice(0, 12));
  assert.equal(await page.locator('#source-body button').count(), 0);
});

test('a token without compute:sources:read is not shown the view', async () => {
  const other = server.admin('token', 'create', '--tenant', 'acme', '--principal', 'otto',
    '--grant', 'compute:fleet:* @ compute-fleet', '--grant', 'compute:proposals:* @ compute-proposals')
    .trim().split('\n').at(-1).trim();
  const { page, problems } = await signIn(browser, server, other);
  assert.equal(await page.locator('nav#views a[href="#source"]').isHidden(), true);
  // Asked for by its address, the page shows a view the token may read instead.
  await page.goto(`${server.base}/console#source`);
  await page.waitForFunction(() => document.body.dataset.view === 'status');
  assert.equal(await page.locator('#view-source').isHidden(), true);
  assert.equal(await page.locator('#source-body').textContent(), '');
  // The browser logs the refused probes (webhooks) itself; nothing else went wrong.
  assert.deepEqual(problems.filter((problem) => !/status of 403/.test(problem)), []);
});

test('a tenant without a source is told how to make one', async () => {
  const empty = server.tenantWithToken('bare');
  const { page, problems } = await signIn(browser, server, empty);
  await openSource(page);
  assert.match(await page.locator('#source-state').textContent(), /^No source/);
  assert.match(await page.locator('#source-command').textContent(), /^fleet source set URL --mode/);
  // The browser logs the NOT_FOUND answer itself; nothing else went wrong.
  assert.deepEqual(problems.filter((problem) => !/status of 404/.test(problem)), []);
});
