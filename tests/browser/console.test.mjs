// The console end to end (SPEC §16), in headless Chromium against the real binary:
// sign-in and sign-out, the estate with plugin kinds, filter, sort and an object's
// audit history and drift, the status updated live from the event stream, history with
// where each revision came from, difference and rollback, proposals proposed, reviewed and applied, webhooks and their attempts, capacity per owner, no string ever run as markup, no serious
// accessibility violation (axe-core), and a 10,000-object estate. Screenshots of every
// view go to target/artifacts/console-*.png (docs/console/ keeps a copy).

import assert from 'node:assert/strict';
import { mkdirSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { after, afterEach, before, test } from 'node:test';

import { ARTIFACTS, FLEET_BIN, estate, closePages, launchBrowser, signIn, startServer, violations } from './support.mjs';

const PLUGIN = join(dirname(FLEET_BIN), 'plugins', 'reservations.wasm');

let server;
let browser;
let token;

before(async () => {
  mkdirSync(ARTIFACTS, { recursive: true });
  // Drift checks every second, so that the live status is seen within the test.
  // Webhooks may reach 127.0.0.1 (a closed port there: every attempt is refused).
  server = await startServer(['--drift-interval', '1s', '--plugin', PLUGIN,
    '--webhook-allow-http', '--webhook-allow', '127.0.0.0/8']);
  token = server.tenantWithToken('acme');
  const document = estate();
  document.reservations = {
    'ml-week': { pool: 'gpu-a', owner: 'team-research', vcpus: 8, gpus: 1,
      startsAt: '2026-12-01T00:00:00Z', endsAt: '2026-12-08T00:00:00Z' },
  };
  await server.ok(token, 'fleet/apply', { document });
  browser = await launchBrowser();
});

afterEach(() => closePages(browser));
after(async () => {
  await browser?.close();
  await server?.stop();
});

const shot = (page, name) => page.screenshot({ path: join(ARTIFACTS, `console-${name}.png`), fullPage: true });

/** Opens a view through the navigation, as a keyboard or mouse user does. */
async function go(page, view) {
  await page.click(`nav#views a[href="#${view}"]`);
  await page.waitForFunction((name) => document.body.dataset.view === name, view);
}


/** The text of the estate table's visible rows. */
const rowNames = (page) => page.locator('#estate-body tr:not(.spacer) th a').allTextContents();

test('sign-in keeps the token in this tab only; sign-out forgets it; a bad token is refused with the reason', async () => {
  const { page, problems } = await signIn(browser, server, token);
  assert.equal(await page.evaluate(() => sessionStorage.getItem('fleet.token')), token);
  assert.equal(await page.evaluate(() => localStorage.length), 0);
  assert.equal(await page.evaluate(() => document.cookie), '');
  assert.ok(!page.url().includes(token));
  // A reload stays signed in (same tab); sign-out forgets, and a reload then asks again.
  await page.reload();
  await page.locator('#who', { hasText: 'tenant acme' }).waitFor();
  await go(page, 'plan');
  await page.locator('#plan-hash', { hasText: 'sha256:' }).waitFor();
  await page.fill('#document', '{"sites": {"secret-site": {"region": "x"}}}');
  await page.click('#sign-out');
  assert.equal(await page.evaluate(() => sessionStorage.getItem('fleet.token')), null);
  // Nothing of the tenant stays in the page.
  assert.equal(await page.locator('#document').inputValue(), '');
  assert.equal(await page.locator('#status-body').textContent(), '');
  assert.doesNotMatch(await page.locator('body').textContent(), /secret-site|tenant acme|gpu-a/);
  assert.equal(await page.locator('#sign-in').isVisible(), true);
  await page.reload();
  assert.equal(await page.locator('#sign-in').isVisible(), true);
  assert.equal(await page.locator('#views').isVisible(), false);

  await page.fill('#token', 'fleet_not_a_token');
  await page.click('#sign-in button[type=submit]');
  await page.locator('#notice', { hasText: 'not accepted' }).waitFor();
  assert.match(await page.locator('#notice').textContent(), /UNAUTHENTICATED/);
  // The browser logs the refused requests itself; nothing else went wrong.
  assert.deepEqual(problems.filter((problem) => !/status of 40[13]/.test(problem)), []);
});

test('a 403 names the permission the token lacks, wherever it is met', async () => {
  const none = server.tenantWithToken('acme-none', 'nobody', ['compute:sites:read @ *']);
  const page = await browser.newPage();
  await page.goto(`${server.base}/console`);
  await page.fill('#token', none);
  await page.click('#sign-in button[type=submit]');
  // It may read nothing the console shows: the sign-in says what it needs, once.
  await page.locator('#notice', { hasText: 'needs compute:fleet:admin @ compute-fleet' }).waitFor();
  const said = await page.locator('#notice').textContent();
  assert.equal(said.split('compute:fleet:admin').length, 2, said);

  // Enough for the fleet methods, not for the audit trail or the events.
  const reader = server.admin('token', 'create', '--tenant', 'acme', '--principal', 'operator',
    '--grant', 'compute:fleet:admin @ compute-fleet').trim().split('\n').at(-1).trim();
  const { page: signed } = await signIn(browser, server, reader);
  await signed.locator('#live', { hasText: 'needs compute:events:read @ compute-events' }).waitFor();
  await signed.goto(`${server.base}/console#object/pool/gpu-a`);
  await signed.locator('#object-audit', { hasText: 'needs compute:audit:read @ compute-audit' }).waitFor();
});

test('the estate: a table per kind (plugin kinds too), filter, sort, and an object with its audit history', async () => {
  const { page, problems } = await signIn(browser, server, token);
  await go(page, 'estate');
  const kinds = await page.locator('#kinds a').allTextContents();
  assert.deepEqual(kinds.map((kind) => kind.replace(/ \d+$/, '')),
    ['Sites', 'Provider accounts', 'Pools', 'Owner quotas', 'Offers', 'Flavors', 'Reservations']);
  await page.click('#kinds a[href="#estate/pool"]');
  await page.locator('#estate-count', { hasText: 'Pools: 2 objects' }).waitFor();
  assert.deepEqual(await rowNames(page), ['cpu-a', 'gpu-a']);
  const headers = await page.locator('#rows thead th').allTextContents();
  assert.deepEqual(headers.slice(0, 4).map((header) => header.replace(/ [▲▼]$/, '')), ['name', 'site', 'account', 'class']);

  // Sort by vcpus, twice: ascending, then descending, said to assistive technology too.
  await page.click('button.sort[data-column="vcpus"]');
  assert.deepEqual(await rowNames(page), ['gpu-a', 'cpu-a']);
  await page.click('button.sort[data-column="vcpus"]');
  assert.deepEqual(await rowNames(page), ['cpu-a', 'gpu-a']);
  assert.equal(await page.locator('th:has(button[data-column="vcpus"])').getAttribute('aria-sort'), 'descending');
  // The filter matches any value: a label.
  await page.fill('#filter', 'h100');
  assert.deepEqual(await rowNames(page), ['gpu-a']);
  assert.match(await page.locator('#shown').textContent(), /1 of 2 match/);
  await shot(page, 'estate');
  await page.fill('#filter', '');

  // A plugin kind's table, once it is drawn (an event from the tenant's apply may
  // redraw the view meanwhile).
  await page.click('#kinds a[href="#estate/reservation"]');
  await page.locator('#estate-count', { hasText: 'Reservations: 1 object' }).waitFor();
  assert.deepEqual(await rowNames(page), ['ml-week']);

  // An object: its fields and its audit history, from the apply.
  await page.click('#kinds a[href="#estate/pool"]');
  await page.click('#rows a:text-is("gpu-a")');
  await page.locator('#object-title', { hasText: 'pool gpu-a' }).waitFor();
  const fields = await page.locator('#object-fields').textContent();
  assert.match(fields, /^Fields.*id.*pool_/);
  assert.match(fields, /accelerator=h100/);
  await page.locator('#object-audit td', { hasText: 'compute.pools.create' }).waitFor();
  assert.match(await page.locator('#object-audit').textContent(), /fleet\.apply.*gpus: null -> 64/);
  await shot(page, 'object');
  assert.deepEqual(problems, []);
});

test('the status is live: a change through the API shows as drift, an apply as converged, with no reload', async () => {
  const { page, problems } = await signIn(browser, server, token);
  await page.locator('#state', { hasText: 'Converged since' }).waitFor();
  await page.locator('#live', { hasText: 'live' }).waitFor();
  assert.equal(await page.locator('#revision').textContent(), '1');
  assert.equal(await page.locator('#heal').textContent(), 'off');
  let loads = 0;
  page.on('load', () => (loads += 1));

  const pool = (await server.ok(token, 'pools/list', {})).items.find((item) => item.class === 'gpu');
  await server.ok(token, 'pools/update', { id: pool.id, gpus: 70 });
  await page.locator('#state', { hasText: 'Drifted since' }).waitFor({ timeout: 15000 });
  const drift = await page.locator('#drift').textContent();
  assert.match(drift, /pool gpu-a/);
  assert.match(drift, /gpus: applied 64, now 70/);
  assert.match(drift, /alice.*compute\.pools\.update/);
  await page.locator('#events li.fleet-drifted').first().waitFor();
  await shot(page, 'status-drifted');

  // Its object view shows the applied and actual values.
  await page.evaluate(() => { location.hash = '#object/pool/gpu-a'; });
  await page.locator('#object-drift', { hasText: 'gpus6470' }).waitFor();
  // The estate was read again on the event: the fields are the actual ones.
  assert.match(await page.locator('#object-fields').textContent(), /gpus70/);
  await go(page, 'status');

  const document = (await server.ok(token, 'fleet/revision', { revision: 1 })).document;
  await server.ok(token, 'fleet/apply', { document });
  await page.locator('#state', { hasText: 'Converged since' }).waitFor({ timeout: 15000 });
  assert.equal(await page.locator('#revision').textContent(), '2');
  await page.locator('#events li.fleet-converged').first().waitFor();
  assert.equal(loads, 0, 'no reload: the page followed the event stream');
  await shot(page, 'status');
  assert.deepEqual(problems, []);
});

/** Where a document came from (SPEC §20.2): a GitHub repository's, every member given. */
const FROM_GITHUB = { repo: 'https://github.com/acme/infra', commit: '3f786850e387550fdab836ed7e6dc881de23001b',
  ref: 'refs/heads/main', path: 'fleet/estate.json' };
/** A scp-like ssh address's, only what is required. */
const FROM_SSH = { repo: 'git@gitlab.example.com:acme/infra.git', commit: '89e6c98d' };

test('history: revisions, the difference between two, and a rollback planned first and applied on confirmation', async () => {
  const own = server.tenantWithToken('hist', 'hana');
  await server.ok(own, 'fleet/apply', { document: estate(), source: FROM_GITHUB });
  const changed = estate();
  changed.pools['gpu-a'].gpus = 80;
  changed.ownerQuotas['team-ml'].instances = 120;
  // Stated at its default now: the same document as the planner reads it, so no difference.
  changed.pools['cpu-a'].gpus = 0;
  await server.ok(own, 'fleet/apply', { document: changed, source: FROM_SSH });

  const { page, problems } = await signIn(browser, server, own);
  await go(page, 'history');
  await page.locator('#revision-table tbody tr').nth(1).waitFor();
  const rows = await page.locator('#revision-table tbody tr th').allTextContents();
  assert.deepEqual(rows, ['2 (applied)', '1']);
  // Where each came from: the repository and the short commit, linked only for https.
  const sources = page.locator('#revision-table tbody td.source');
  assert.deepEqual(await sources.allTextContents(), [
    'git@gitlab.example.com:acme/infra.git @ 89e6c98',
    'https://github.com/acme/infra @ 3f78685 (refs/heads/main, fleet/estate.json)',
  ]);
  assert.equal(await sources.nth(0).locator('a').count(), 0, 'an ssh address links nowhere');
  assert.equal(await sources.nth(1).locator('a').getAttribute('href'), `https://github.com/acme/infra/commit/${FROM_GITHUB.commit}`);
  await go(page, 'status');
  await page.locator('#applied-source', { hasText: 'git@gitlab.example.com:acme/infra.git @ 89e6c98' }).waitFor();
  await go(page, 'history');
  await page.locator('#revision-table tbody tr').nth(1).waitFor();
  assert.equal(await page.locator('#from').inputValue(), '1');
  assert.equal(await page.locator('#to').inputValue(), '2');
  await page.click('#compare button[type=submit]');
  await page.locator('#difference', { hasText: 'From revision 1 to 2' }).waitFor();
  const lines = await page.locator('#difference .change .text').allTextContents();
  assert.ok(lines.includes('~ pool gpu-a: update (gpus 64 -> 80)'), lines.join('\n'));
  assert.ok(lines.includes('~ ownerQuota team-ml: update (instances 100 -> 120)'), lines.join('\n'));
  assert.equal(lines.length, 2, lines.join('\n'));
  await shot(page, 'history');

  // Rollback: the plan first, in the Plan view, with the server's hash.
  await page.click('button[data-revision="1"]');
  await page.locator('#plan-intent', { hasText: 'Rolling back to revision 1' }).waitFor();
  await page.locator('#summary', { hasText: '2 to update' }).waitFor();
  const hash = await page.locator('#plan-hash').textContent();
  const first = await server.ok(own, 'fleet/revision', { revision: 1 });
  const serverPlan = await server.ok(own, 'fleet/plan', { document: first.document, prune: first.prune });
  assert.equal(hash, serverPlan.planHash);
  assert.equal((await server.ok(own, 'fleet/status', {})).applied.revision, 2, 'nothing applied before confirming');
  page.once('dialog', (dialog) => dialog.accept());
  await page.click('#apply');
  await page.locator('#outcome', { hasText: 'Applied 2 calls' }).waitFor();
  const status = await server.ok(own, 'fleet/status', {});
  assert.equal(status.applied.revision, 3);
  assert.equal(status.applied.planHash, hash);
  assert.deepEqual(problems, []);
});

test('proposals: the Plan view proposes, another principal approves with a comment, and the proposal applies', async () => {
  const author = server.tenantWithToken('prop', 'paula');
  const created = server.admin('token', 'create', '--tenant', 'prop', '--principal', 'rex', '--grant', 'compute:*:* @ *');
  const reviewer = created.trim().split('\n').at(-1).trim();
  await server.ok(author, 'fleet/apply', { document: estate() });
  const changed = estate();
  changed.pools['gpu-a'].gpus = 80;

  // The author plans in the browser and proposes instead of applying.
  const { page, problems } = await signIn(browser, server, author, '#plan');
  await page.fill('#document', JSON.stringify(changed, null, 2));
  await page.locator('#summary', { hasText: '1 to update' }).waitFor();
  const hash = await page.locator('#plan-hash').textContent();
  page.once('dialog', (dialog) => dialog.accept('gpu-a to 80 GPUs'));
  await page.click('#propose');
  await page.waitForFunction(() => document.body.dataset.view === 'proposals');
  await page.locator('#proposal-title', { hasText: '#1 gpu-a to 80 GPUs' }).waitFor();
  await page.locator('#proposal-approval', { hasText: 'Not approved by the default rule' }).waitFor();
  assert.equal(await page.locator('#approve').count(), 0, 'the author does not review');
  assert.equal(await page.locator('#withdraw').count(), 1);
  assert.equal(await page.locator('#proposal .hash code').textContent(), hash, 'the plan proposed is the plan shown');
  assert.equal((await server.ok(author, 'fleet/status', {})).applied.revision, 1, 'nothing applied by proposing');

  // Another principal reviews it with a comment, then applies it.
  const second = await signIn(browser, server, reviewer, '#proposals/1');
  await second.page.locator('#proposal-title', { hasText: '#1' }).waitFor();
  await second.page.fill('#review-comment', 'capacity is there');
  await second.page.click('#approve');
  await second.page.locator('#proposal-outcome', { hasText: 'the proposal is approved' }).waitFor();
  await second.page.locator('#proposal .reviews', { hasText: 'rex approved' }).waitFor();
  assert.deepEqual(await violations(second.page), []);
  await shot(second.page, 'proposals');
  second.page.once('dialog', (dialog) => dialog.accept());
  await second.page.click('#apply-proposal');
  await second.page.locator('#proposal-outcome', { hasText: 'Applied 1 call' }).waitFor();
  await second.page.locator('#proposal-standing', { hasText: 'applied as revision 2' }).waitFor();
  const history = await server.ok(author, 'fleet/history', {});
  assert.equal(history.revisions[0].proposal, 1);
  assert.equal(history.revisions[0].planHash, hash);
  assert.deepEqual([...problems, ...second.problems], []);
});

test('a reviewer signs in with what its token holds: Proposals alone, and reviews there', async () => {
  const author = server.tenantWithToken('rev', 'paula');
  const reviewer = server.admin('token', 'create', '--tenant', 'rev', '--principal', 'rita',
    '--grant', 'compute:proposals:read @ compute-proposals', '--grant', 'compute:proposals:review @ compute-proposals')
    .trim().split('\n').at(-1).trim();
  const changed = estate();
  changed.pools['gpu-a'].gpus = 72;
  await server.ok(author, 'proposals/create', { document: changed, title: 'more GPUs', source: FROM_GITHUB });

  const page = await browser.newPage();
  await page.goto(`${server.base}/console`);
  await page.fill('#token', reviewer);
  await page.click('#sign-in button[type=submit]');
  await page.waitForFunction(() => document.body.dataset.view === 'proposals');
  await page.locator('#who', { hasText: 'rita · may read proposals' }).waitFor();
  const shown = await page.locator('nav#views a:not([hidden])').allTextContents();
  assert.deepEqual(shown, ['Proposals']);
  await page.goto(`${server.base}/console#proposals/1`);
  await page.locator('#proposal-title', { hasText: '#1 more GPUs' }).waitFor();
  assert.equal(await page.locator('#apply-proposal').count(), 0, 'applying needs fleet admin');
  // Where the proposed document came from, in the list and with the proposal.
  const whence = 'https://github.com/acme/infra @ 3f78685 (refs/heads/main, fleet/estate.json)';
  assert.equal(await page.locator('#proposal-table tbody td.source').first().textContent(), whence);
  assert.equal(await page.locator('#proposal-source').textContent(), `from ${whence}`);
  assert.equal(await page.locator('#proposal-source a').getAttribute('href'),
    `https://github.com/acme/infra/commit/${FROM_GITHUB.commit}`);
  // A comment box, a few lines tall, not the plan editor's.
  const box = await page.locator('#review-comment').boundingBox();
  assert.ok(box.height < 150, `the review box is ${box.height} px tall`);
  // On a phone the list says it scrolls sideways, and scrolls within itself.
  await page.setViewportSize({ width: 390, height: 844 });
  const caption = await page.locator('#proposal-table caption').evaluate((node) => getComputedStyle(node, '::after').content);
  assert.match(caption, /scroll sideways/);
  const region = await page.locator('#proposal-list .scroll').evaluate((node) => [node.scrollWidth, node.clientWidth]);
  assert.ok(region[0] > region[1], `the table is wider than its region, which scrolls: ${region}`);
  await page.setViewportSize({ width: 1280, height: 800 });
  await page.click('#approve');
  await page.locator('#proposal .reviews', { hasText: 'rita approved' }).waitFor();
  // A view it may not read is not shown: the status view sends it to Proposals.
  await page.goto(`${server.base}/console#status`);
  await page.waitForFunction(() => document.body.dataset.view === 'proposals');
});

test('webhooks: each with its latest delivery attempts, an error said in words', async () => {
  const own = server.tenantWithToken('hooks', 'wanda');
  await server.ok(own, 'webhooks/put', { name: 'ops', url: 'http://127.0.0.1:9/hook', events: ['*'] });
  await server.ok(own, 'webhooks/test', { name: 'ops' });
  // The first attempt is refused (nothing listens on port 9) and waits for its retry.
  for (let tries = 0; ; tries += 1) {
    const { deliveries } = await server.ok(own, 'webhooks/deliveries', { name: 'ops' });
    if (deliveries.length) break;
    assert.ok(tries < 100, 'an attempt within 10 s');
    await new Promise((done) => setTimeout(done, 100));
  }
  const { page, problems } = await signIn(browser, server, own, '#webhooks');
  const section = page.locator('section.webhook', { hasText: 'ops' });
  await section.locator('table tbody tr').first().waitFor();
  assert.match(await section.textContent(), /http:\/\/127\.0\.0\.1:9\/hook/);
  const row = await section.locator('table tbody tr').first().textContent();
  assert.match(row, /webhook\.test/);
  assert.match(row, /connecting to 127\.0\.0\.1:9/);
  assert.match(row, /pending/);
  assert.deepEqual(await violations(page), []);
  await shot(page, 'webhooks');
  assert.deepEqual(problems, []);
});

test('capacity: per owner, quota against owned pools and offers, with an overcommit marked in words', async () => {
  const { page, problems } = await signIn(browser, server, token);
  await go(page, 'capacity');
  const owners = await page.locator('#owners figure').evaluateAll((figures) => figures.map((figure) => figure.dataset.owner));
  assert.deepEqual(owners, ['team-ml', 'team-research', 'team-web']);
  // team-ml: pools of 512 vcpus, 64 offered away, quota 256: over quota.
  const ml = page.locator('figure[data-owner="team-ml"]');
  assert.match(await ml.locator('figcaption').textContent(), /overcommitted/);
  assert.match(await ml.locator('.overcommits').textContent(), /capacity of 448 vcpus exceeds the quota of 256/);
  const research = page.locator('figure[data-owner="team-research"]');
  assert.match(await research.locator('figcaption').textContent(), /no quota/);
  assert.match(await research.locator('svg').textContent(), /offers received.*64/);
  assert.match(await research.locator('svg').getAttribute('aria-label'), /vcpus: owned pools 0, offers given 0, offers received 64/);
  await shot(page, 'capacity');
  assert.deepEqual(problems, []);

  // A pool offered beyond itself is an overcommit even when its owner's pools together
  // could give as much.
  const own = server.tenantWithToken('cap', 'carol');
  await server.ok(own, 'fleet/apply', { document: {
    sites: { lab: { region: 'eu-central-1' } },
    providerAccounts: { aws: { provider: 'aws' } },
    pools: {
      small: { site: 'lab', account: 'aws', class: 'cpu', owner: 'team-x', vcpus: 10 },
      large: { site: 'lab', account: 'aws', class: 'cpu', owner: 'team-x', vcpus: 100 },
    },
    offers: { 'too-much': { pool: 'small', to: 'team-y', vcpus: 50 } },
  } });
  const { page: other } = await signIn(browser, server, own);
  await go(other, 'capacity');
  const x = other.locator('figure[data-owner="team-x"]');
  assert.match(await x.locator('.overcommits').textContent(), /the offers of pool small give 50 vcpus out of 10/);
  assert.doesNotMatch(await x.locator('.overcommits').textContent(), /out of pools/);
});

test('no string reaches the DOM as markup: a planted <img onerror> stays text in every view', async () => {
  const own = server.tenantWithToken('xss', 'mallory');
  const planted = '<img src=x onerror="window.__pwned = 1">';
  const document = estate();
  document.sites.lab.description = planted;
  document.pools['gpu-a'].labels = { note: planted };
  await server.ok(own, 'fleet/apply', { document, source: { ...FROM_GITHUB, ref: planted, path: planted } });
  const site = (await server.ok(own, 'sites/list', {})).items.find((item) => item.region === 'eu-central-1');
  await server.ok(own, 'sites/update', { id: site.id, description: `${planted}<script>window.__pwned = 2</script>` });

  const { page, problems } = await signIn(browser, server, own);
  await page.locator('#state', { hasText: 'Drifted since' }).waitFor({ timeout: 15000 });
  for (const view of ['#estate/site', '#object/site/lab', '#estate/pool', '#object/pool/gpu-a', '#history', '#capacity', '#plan']) {
    await page.evaluate((hash) => { location.hash = hash; }, view);
    await page.waitForTimeout(150);
  }
  await page.fill('#document', JSON.stringify({ sites: { [planted]: { region: planted } } }));
  await page.locator('#errors').waitFor();
  await page.evaluate(() => { location.hash = '#object/site/lab'; });
  await page.locator('#object-fields', { hasText: planted }).waitFor();
  assert.equal(await page.evaluate(() => window.__pwned), undefined, 'nothing planted ran');
  assert.equal(await page.locator('img').count(), 0, 'no planted element exists');
  assert.equal(await page.locator('main script, main b').count(), 0);
  assert.deepEqual(problems, []);
});

test('every view passes axe-core with no serious or critical violation', async () => {
  const { page, problems } = await signIn(browser, server, token);
  const found = {};
  for (const view of ['status', 'estate', 'plan', 'proposals', 'history', 'webhooks', 'capacity']) {
    await go(page, view);
    if (view === 'webhooks') await page.locator('#webhook-list > *').first().waitFor();
    if (view === 'plan') await page.locator('#plan-hash', { hasText: 'sha256:' }).waitFor();
    if (view === 'proposals') await page.locator('#proposal-list > *').first().waitFor();
    if (view === 'history') await page.locator('#revision-table').waitFor();
    found[view] = await violations(page);
  }
  await page.goto(`${server.base}/console#object/pool/gpu-a`);
  await page.locator('#object-audit table').waitFor();
  found.object = await violations(page);
  await page.click('#sign-out');
  found['sign-in'] = await violations(page);
  await shot(page, 'sign-in');
  assert.deepEqual(found, {
    status: [], estate: [], plan: [], proposals: [], history: [], webhooks: [], capacity: [], object: [], 'sign-in': [],
  });
  // Every control is reachable by keyboard: the first Tab lands on the skip link, then the form.
  await page.reload();
  await page.keyboard.press('Tab');
  assert.equal(await page.evaluate(() => document.activeElement.className), 'skip');
  await page.keyboard.press('Tab');
  assert.equal(await page.evaluate(() => document.activeElement.id), 'token');
  assert.deepEqual(problems, []);
});

/**
 * What a viewport shows wrong, measured from the elements' boxes: how far the page
 * scrolls sideways, the boxes outside the screen (but in a box of their own that
 * scrolls), and the pairs of boxes that overlap with neither inside the other.
 */
function layoutProblems() {
  const scrolls = (node) => ['auto', 'scroll'].includes(getComputedStyle(node).overflowX);
  const inScroller = (node) => {
    for (let parent = node.parentElement; parent && parent !== document.body; parent = parent.parentElement) {
      if (scrolls(parent)) return true;
    }
    return false;
  };
  const name = (node) => `${node.tagName.toLowerCase()}${node.id ? `#${node.id}` : ''}` +
    `${node.className && typeof node.className === 'string' ? `.${node.className.split(' ')[0]}` : ''}` +
    ` "${(node.textContent ?? '').trim().slice(0, 24)}"`;
  const boxes = [...document.querySelectorAll(
    'header :is(h1, label, input, button, #who), nav#views a, ' +
    'section.view:not([hidden]) :is(h2, h3, h4, button, input, select, label, a, textarea, p, table, svg, dl, figure, summary, nav)')]
    .filter((node) => {
      const box = node.getBoundingClientRect();
      return box.width > 1 && box.height > 1 && getComputedStyle(node).visibility !== 'hidden';
    });
  const outside = boxes
    .filter((node) => !inScroller(node))
    .filter((node) => { const box = node.getBoundingClientRect(); return box.left < -1 || box.right > window.innerWidth + 1; })
    .map(name);
  const overlapping = [];
  for (let i = 0; i < boxes.length; i += 1) {
    for (let j = i + 1; j < boxes.length; j += 1) {
      const [a, b] = [boxes[i], boxes[j]];
      if (a.contains(b) || b.contains(a)) continue;
      const [p, q] = [a.getBoundingClientRect(), b.getBoundingClientRect()];
      const width = Math.min(p.right, q.right) - Math.max(p.left, q.left);
      const height = Math.min(p.bottom, q.bottom) - Math.max(p.top, q.top);
      if (width > 1 && height > 1) overlapping.push(`${name(a)} / ${name(b)}`);
    }
  }
  return { sideways: document.documentElement.scrollWidth - window.innerWidth, outside, overlapping };
}

test('every view fits a 1280×800 screen and a 390×844 phone: nothing scrolls sideways, no two boxes overlap', async () => {
  const { page, problems } = await signIn(browser, server, token);
  const found = {};
  for (const [width, height] of [[1280, 800], [390, 844]]) {
    await page.setViewportSize({ width, height });
    for (const view of ['status', 'estate', 'object', 'plan', 'proposals', 'history', 'webhooks', 'capacity']) {
      if (view === 'object') {
        await page.evaluate(() => { location.hash = '#object/pool/gpu-a'; });
        await page.locator('#object-audit table').waitFor();
      } else {
        await go(page, view);
      }
      if (view === 'plan') await page.locator('#plan-hash', { hasText: 'sha256:' }).waitFor();
      if (view === 'proposals') await page.locator('#proposal-list > *').first().waitFor();
      if (view === 'webhooks') await page.locator('#webhook-list > *').first().waitFor();
      if (view === 'history') await page.locator('#revision-table').waitFor();
      const problemsHere = await page.evaluate(layoutProblems);
      const wrong = problemsHere.sideways > 0 || problemsHere.outside.length || problemsHere.overlapping.length;
      if (wrong) found[`${view} at ${width}×${height}`] = problemsHere;
      await page.screenshot({ path: join(ARTIFACTS, `console-${view}-${width}.png`) });
    }
  }
  assert.deepEqual(found, {});
  assert.deepEqual(problems, []);
});

test('history shows which revisions overrode a policy, by whom and why', async () => {
  const own = server.tenantWithToken('overridden', 'olga');
  const source = 'package gpus\n\ndeny contains "more than 70 GPUs in a pool" if {\n\tsome change in input.changes\n' +
    '\tchange.after.gpus > 70\n}\n';
  await server.ok(own, 'policies/put', { name: 'gpu-cap', level: 'mandatory', source });
  const document = estate();
  document.pools['gpu-a'].gpus = 80;
  await server.ok(own, 'fleet/apply', { document, overrides: [{ policy: 'gpu-cap', reason: 'the training run of week 49' }] });
  const { page, problems } = await signIn(browser, server, own);
  await go(page, 'history');
  const row = page.locator('#revision-table tbody tr').first();
  await row.waitFor();
  assert.match(await row.textContent(), /olga.*gpu-cap: the training run of week 49/);
  assert.deepEqual(problems, []);
});

/** A 10,000-object estate: 20 sites, 20 accounts, 4,000 pools, 40 quotas, 2,920 offers, 3,000 flavors. */
function bigEstate() {
  const document = { sites: {}, providerAccounts: {}, pools: {}, ownerQuotas: {}, offers: {}, flavors: {} };
  for (let i = 0; i < 20; i += 1) {
    document.sites[`site-${i}`] = { region: `region-${i % 5}` };
    document.providerAccounts[`account-${i}`] = { provider: 'aws', credentialsRef: `vault:aws/${i}` };
  }
  for (let i = 0; i < 40; i += 1) document.ownerQuotas[`team-${i}`] = { vcpus: 100000, memoryMib: 1 << 30, gpus: 5000 };
  for (let i = 0; i < 4000; i += 1) {
    document.pools[`pool-${i}`] = { site: `site-${i % 20}`, account: `account-${i % 20}`, class: i % 4 ? 'cpu' : 'gpu',
      owner: `team-${i % 40}`, vcpus: 64 + i, memoryMib: 262144, gpus: i % 4 ? 0 : 8 };
  }
  for (let i = 0; i < 2920; i += 1) document.offers[`offer-${i}`] = { pool: `pool-${i}`, to: `team-${(i + 1) % 40}`, vcpus: 8 };
  for (let i = 0; i < 3000; i += 1) document.flavors[`flavor-${i}`] = { pool: `pool-${i}`, vcpus: 2, memoryMib: 4096 };
  return document;
}

test('a 10,000-object estate: the table draws what is on screen and stays responsive', async (t) => {
  const own = server.tenantWithToken('big', 'bea');
  await server.ok(own, 'fleet/apply', { document: bigEstate() });
  const { page, problems } = await signIn(browser, server, own);
  await page.evaluate(() => { location.hash = '#estate/pool'; });
  await page.locator('#estate-count', { hasText: 'Pools: 4000 objects' }).waitFor();
  await page.waitForFunction(() => document.body.dataset.estatePaintMs);
  t.diagnostic(`10k estate: first paint of the 4,000-pool table in ${await page.evaluate(() => document.body.dataset.estatePaintMs)} ms`);
  const drawn = await page.locator('#estate-body tr:not(.spacer)').count();
  assert.ok(drawn < 100, `only the rows on screen are drawn (${drawn})`);
  assert.equal((await rowNames(page))[0], 'pool-0', 'names sort as numbers do');
  // Scrolled to the end, the last rows are drawn.
  await page.locator('#rows').evaluate((rows) => { rows.scrollTop = rows.scrollHeight; });
  await page.locator('#estate-body a', { hasText: 'pool-3999' }).waitFor();
  assert.equal((await rowNames(page)).at(-1), 'pool-3999');
  // Sorting and filtering 4,000 rows.
  let started = Date.now();
  await page.click('button.sort[data-column="vcpus"]');
  await page.click('button.sort[data-column="vcpus"]');
  await page.locator('#rows').evaluate((rows) => { rows.scrollTop = 0; });
  await page.waitForFunction(() => document.querySelector('#estate-body th a')?.textContent === 'pool-3999');
  t.diagnostic(`10k estate: two sorts of 4,000 pools and a scroll in ${Date.now() - started} ms`);
  started = Date.now();
  await page.fill('#filter', 'pool-123');
  await page.locator('#shown', { hasText: '11 of 4000 match' }).waitFor();
  t.diagnostic(`10k estate: a filter over 4,000 pools in ${Date.now() - started} ms`);
  await page.fill('#filter', '');
  await shot(page, 'estate-10k');
  await go(page, 'plan');
  await page.locator('#plan-hash', { hasText: 'sha256:' }).waitFor();
  t.diagnostic(`10k estate: the export planned in the browser in ${await page.locator('#timing').getAttribute('data-ms')} ms`);
  await go(page, 'capacity');
  assert.equal(await page.locator('#owners figure').count(), 40);
  assert.deepEqual(problems, []);
});
