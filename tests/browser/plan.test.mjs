// The console's Plan view end to end: the real `fleet` binary, the page in headless
// Chromium (Debian's package, driven by playwright-core), a token, an edited document,
// the plan computed in the browser compared byte for byte with the server's, an apply
// through the server, and screenshots in target/artifacts/.

import assert from 'node:assert/strict';
import { mkdirSync, readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { after, afterEach, before, test } from 'node:test';

import { ARTIFACTS, FLEET_BIN, REPO, estate, closePages, launchBrowser, signIn, startServer, tempDir } from './support.mjs';

let server;
let browser;
let token;

before(async () => {
  mkdirSync(ARTIFACTS, { recursive: true });
  server = await startServer();
  token = server.tenantWithToken('acme');
  await server.ok(token, 'fleet/apply', { document: estate() });
  browser = await launchBrowser();
});

afterEach(() => closePages(browser));
after(async () => {
  await browser?.close();
  await server?.stop();
});

/** Signs in to the console's Plan view and waits for the first plan. */
const open = (on = server, with_token = token) => signIn(browser, on, with_token, '#plan');

/** A document as YAML, a section a line (each section's objects in JSON, a YAML flow map). */
const asYaml = (document) =>
  Object.entries(document).map(([section, objects]) => `${section}: ${JSON.stringify(objects)}`).join('\n');

/** Types a document into the page and waits until the shown plan is for it. */
async function edit(page, document) {
  const before = await page.evaluate(() => document.body.dataset.planned);
  await page.fill('#document', typeof document === 'string' ? document : JSON.stringify(document, null, 2));
  await page.waitForFunction((previous) => document.body.dataset.planned !== previous, before);
}

/** What the page shows: the raw plan JSON, the hash, the summary and the change lines. */
async function shown(page) {
  return {
    json: await page.locator('#plan-json').textContent(),
    hash: await page.locator('#plan-hash').textContent(),
    summary: await page.locator('#summary').textContent(),
    lines: await page.locator('.change .text').allTextContents(),
  };
}

test('the browser plans byte for byte as the server, then applies through it', async () => {
  const { page, problems } = await open();

  // The token is in no URL the page loads or shows.
  assert.ok(!page.url().includes(token));

  // The exported document, unchanged, plans no calls, with the server's hash.
  const exported = (await server.ok(token, 'fleet/export', {})).document;
  let view = await shown(page);
  assert.match(view.summary, /no changes/);
  let server_plan = await server.call(token, 'fleet/plan', { document: exported, prune: false });
  assert.equal(view.hash, server_plan.json.planHash);
  assert.equal(view.json, server_plan.text);

  // An edit: more GPUs, a new pool, a renamed offer target, a new flavor.
  const edited = structuredClone(exported);
  edited.pools['gpu-a'].gpus = 128;
  edited.pools['gpu-b'] = { site: 'lab', account: 'aws-main', class: 'gpu', owner: 'team-ml', vcpus: 64, gpus: 8 };
  edited.offers['ml-to-research'].vcpus = 96;
  edited.flavors['g1-small'] = { pool: 'gpu-b', vcpus: 2, memoryMib: 16384, gpus: 1, diskGib: 20 };
  await edit(page, edited);
  view = await shown(page);
  server_plan = await server.call(token, 'fleet/plan', { document: edited, prune: false });
  assert.equal(server_plan.status, 200);
  assert.equal(view.hash, server_plan.json.planHash, 'the plan hash shown is the server plan hash');
  assert.equal(view.json, server_plan.text, 'the browser plan is the server plan, byte for byte');
  assert.ok(view.lines.includes('+ pool gpu-b: create (class gpu, site lab, 8 gpus)'), view.lines.join('\n'));
  assert.ok(view.lines.some((line) => line.startsWith('~ pool gpu-a: update')), view.lines.join('\n'));
  assert.match(view.summary, /2 to create · .*2 to update|2 to create, 2 to update/);
  await page.screenshot({ path: join(ARTIFACTS, 'plan.png'), fullPage: true });

  // Prune changes the plan in the browser exactly as on the server.
  const planned = await page.evaluate(() => document.body.dataset.planned);
  await page.check('#prune');
  await page.waitForFunction((previous) => document.body.dataset.planned !== previous, planned);
  const pruned = await shown(page);
  const server_pruned = await server.call(token, 'fleet/plan', { document: edited, prune: true });
  assert.equal(pruned.json, server_pruned.text);
  await page.uncheck('#prune');
  await page.locator('#plan-hash', { hasText: view.hash }).waitFor();

  // Apply through the server with the shown hash, and see the status change.
  const before_status = await server.ok(token, 'fleet/status', {});
  const asked = [];
  page.once('dialog', (dialog) => {
    asked.push(dialog.message());
    dialog.accept();
  });
  await page.click('#apply');
  await page.locator('#outcome', { hasText: 'Applied 4 calls' }).waitFor();
  const status = await server.ok(token, 'fleet/status', {});
  assert.notEqual(status.applied.planHash, before_status.applied.planHash);
  assert.equal(status.applied.planHash, view.hash);
  assert.equal(status.applied.calls, 4);
  assert.match(await page.locator('#outcome').textContent(), new RegExp(view.hash));
  assert.match(asked[0], /^Apply 4 calls to the tenant\?/, 'Apply asks first, with the summary');
  assert.doesNotMatch(await page.locator('#outcome').textContent(), /"applied"/, 'the status in words, not JSON');
  // The page took a new snapshot: the same document now plans no calls.
  await page.locator('#summary', { hasText: 'no changes' }).waitFor();
  await page.screenshot({ path: join(ARTIFACTS, 'plan-applied.png'), fullPage: true });
  assert.deepEqual(problems, []);
});

test('blocked changes and invalid documents show as the server reports them', async () => {
  const { page, problems } = await open();
  const exported = (await server.ok(token, 'fleet/export', {})).document;

  const blocked = structuredClone(exported);
  blocked.pools['gpu-a'].class = 'cpu';
  blocked.offers['to-nowhere'] = { pool: 'no-such-pool', to: 'team-web' };
  await edit(page, blocked);
  const view = await shown(page);
  const server_plan = await server.call(token, 'fleet/plan', { document: blocked, prune: false });
  assert.equal(view.json, server_plan.text);
  assert.ok(view.lines.some((line) => line.startsWith('! pool gpu-a')), view.lines.join('\n'));
  assert.match(await page.locator('#blocked').textContent(), /class is immutable \(gpu -> cpu\)/);
  assert.equal(await page.locator('#apply').isDisabled(), true);

  const invalid = structuredClone(exported);
  invalid.pools['gpu-a'].vcpus = 'many';
  invalid.pools.Bad = { site: 'lab' };
  await edit(page, invalid);
  const errors = await page.locator('#errors').textContent();
  const server_error = await server.call(token, 'fleet/plan', { document: invalid, prune: false });
  assert.equal(server_error.json.error.code, 'INVALID_ARGUMENT');
  assert.match(errors, /INVALID_ARGUMENT/);
  for (const problem of server_error.json.error.details.problems) {
    assert.ok(errors.includes(problem.path), `${problem.path} is shown: ${errors}`);
  }
  await page.screenshot({ path: join(ARTIFACTS, 'plan-invalid.png'), fullPage: true });

  await edit(page, '{"pools": {');
  assert.match(await page.locator('#errors').textContent(), /not valid JSON/);
  assert.deepEqual(problems, []);
});

test('a rename plans in the browser as at the server and shows as one line', async () => {
  const { page, problems } = await open();
  const exported = (await server.ok(token, 'fleet/export', {})).document;
  const renamed = structuredClone(exported);
  renamed.pools['gpu-main'] = renamed.pools['gpu-a'];
  delete renamed.pools['gpu-a'];
  for (const section of ['offers', 'flavors']) {
    for (const object of Object.values(renamed[section] ?? {})) {
      if (object.pool === 'gpu-a') object.pool = 'gpu-main';
    }
  }
  renamed.moved = [{ kind: 'pool', from: 'gpu-a', to: 'gpu-main' }];
  await edit(page, renamed);
  const view = await shown(page);
  const server_plan = await server.call(token, 'fleet/plan', { document: renamed, prune: false });
  assert.equal(view.json, server_plan.text);
  assert.deepEqual(view.lines, ['~ pool gpu-a → gpu-main: rename']);
  assert.match(view.summary, /1 to rename/);
  assert.deepEqual(problems, []);
});

test('policies judge the browser plan as they judge the server plan, and a denial disables apply', async () => {
  // A tenant of its own, with a mandatory policy of the examples in force.
  const judged = server.tenantWithToken('judged');
  await server.ok(judged, 'fleet/apply', { document: estate() });
  const source = readFileSync(join(REPO, 'policies/gpus-per-pool.rego'), 'utf8');
  await server.ok(judged, 'policies/put', { name: 'gpus-per-pool', level: 'mandatory', source });
  const { page, problems } = await open(server, judged);
  const exported = (await server.ok(judged, 'fleet/export', {})).document;
  const greedy = structuredClone(exported);
  greedy.pools['gpu-a'].gpus = 96;
  await edit(page, greedy);
  const view = await shown(page);
  const server_plan = await server.call(judged, 'fleet/plan', { document: greedy, prune: false });
  assert.equal(server_plan.json.summary.denied, 1, server_plan.text);
  assert.equal(view.json, server_plan.text, 'the browser reaches the server verdicts, byte for byte');
  assert.equal(view.hash, server_plan.json.planHash);
  const verdicts = await page.locator('#verdicts').textContent();
  assert.match(verdicts, /Denied by policy/);
  assert.match(verdicts, /! policy gpus-per-pool \(mandatory\): asks for 96 GPUs; a pool has at most 64/);
  assert.match(view.summary, /1 denied/);
  assert.equal(await page.locator('#apply').isDisabled(), true);
  await page.screenshot({ path: join(ARTIFACTS, 'plan-policy.png'), fullPage: true });
  assert.deepEqual(problems, []);
});

test('the page itself answers apply with UNSUPPORTED: the browser has no composite methods', async () => {
  const { page } = await open();
  const code = await page.evaluate(async () => {
    const { loadPlanner } = await import('/console/planner.js');
    const component = await import('/console/assets/fleet_planner.js');
    const compile = (name) => WebAssembly.compileStreaming(fetch(`/console/assets/${name}`));
    const planner = await loadPlanner(component, compile, { caller: { tenant: 'acme', principal: 'alice' } });
    try {
      planner.apply('{"document": {}}');
      return 'applied';
    } catch (error) {
      return error.code;
    }
  });
  assert.equal(code, 'UNSUPPORTED');
});

test('plan time in the browser for the demo estate', async (t) => {
  const demo = await startServer(['--demo']);
  try {
    const line = demo.banner.find((text) => text.includes('FLEET_TOKEN='));
    const demoToken = line.split('FLEET_TOKEN=')[1].trim();
    const opened = performance.now();
    const { page } = await signIn(browser, demo, demoToken, '#plan');
    const loaded = performance.now() - opened;
    const times = await page.evaluate(() => {
      const area = document.querySelector('#document');
      const samples = [];
      for (let round = 0; round < 50; round += 1) {
        area.dispatchEvent(new Event('input'));
        samples.push(Number(document.querySelector('#timing').dataset.ms));
      }
      return samples.sort((a, b) => a - b);
    });
    const median = times[Math.floor(times.length / 2)];
    t.diagnostic(`demo estate, page open and sign-in to first plan (component fetched and compiled): ${loaded.toFixed(0)} ms`);
    t.diagnostic(`demo estate, plan in Chromium: median ${median.toFixed(2)} ms, max ${times.at(-1).toFixed(2)} ms over ${times.length} plans`);
    assert.ok(median < 250, `a plan of the demo estate takes ${median} ms`);
  } finally {
    await demo.stop();
  }
});

test('without built assets the server still runs, the console too, and the Plan view says how to build them', async () => {
  const empty = tempDir('fleet-no-assets-');
  const bare = await startServer(['--console-dir', empty]);
  try {
    assert.ok(bare.banner.some((line) => line.startsWith('console: not built') && line.includes(`CONSOLE_OUT=${empty}`) &&
      line.includes('console/build.sh')), bare.banner.join('\n'));
    const bareToken = bare.tenantWithToken('acme');
    await bare.ok(bareToken, 'fleet/apply', { document: estate() });
    const { page } = await signIn(browser, bare, bareToken);
    await page.click('nav#views a[href="#plan"]');
    const intent = page.locator('#plan-intent');
    await intent.waitFor();
    assert.match(await intent.textContent(), /cannot run in this page.*assets are not built.*console\/build\.sh/);
    assert.equal(await page.locator('#plan-hash').textContent(), '—');
    await page.screenshot({ path: join(ARTIFACTS, 'plan-not-built.png'), fullPage: true });
    // The views that need no planner work.
    await page.click('nav#views a[href="#estate"]');
    await page.locator('#rows a', { hasText: 'eu-west' }).waitFor();
    const health = await fetch(`${bare.base}/healthz`);
    assert.equal(await health.text(), 'ok');
  } finally {
    await bare.stop();
  }
});

test('assets: content types, no path traversal, no auth needed', async () => {
  const get = (path) => fetch(`${server.base}${path}`);
  const old = await fetch(`${server.base}/preview`, { redirect: 'manual' });
  assert.equal(old.status, 308);
  assert.equal(old.headers.get('location'), '/console');
  const page = await get('/console');
  assert.equal(page.status, 200);
  assert.match(page.headers.get('content-type'), /^text\/html/);
  assert.match(page.headers.get('content-security-policy'), /script-src 'self' 'wasm-unsafe-eval'/);
  assert.match((await get('/console/assets/fleet_planner.js')).headers.get('content-type'), /^text\/javascript/);
  assert.equal((await get('/console/assets/fleet_planner.core.wasm')).headers.get('content-type'), 'application/wasm');
  for (const path of [
    '/console/assets/..%2f..%2fCargo.toml',
    '/console/assets/%2e%2e/fleet.db',
    '/console/assets/../../../etc/passwd',
    '/console/assets/.hidden.js',
    '/console/assets/fleet_planner.d.ts',
    '/console/nope.js',
  ]) {
    assert.equal((await get(path)).status, 404, path);
  }
});

test('apply asks first, loudly when it archives or deletes, and a refusal applies nothing', async () => {
  const { page, problems } = await open();
  const exported = (await server.ok(token, 'fleet/export', {})).document;
  const flavors = (await server.ok(token, 'flavors/list', {})).items.length;
  const without = structuredClone(exported);
  delete without.flavors['g1-large'];
  await edit(page, without);
  // Without prune the flavor is left alone, and the page says so.
  assert.match(await page.locator('#left-alone').textContent(),
    /1 live flavor not in the document is left alone; prune would delete it\./);
  const planned = await page.evaluate(() => document.body.dataset.planned);
  await page.check('#prune');
  await page.waitForFunction((previous) => document.body.dataset.planned !== previous, planned);
  assert.equal(await page.locator('#left-alone').isHidden(), true);
  let message = '';
  page.once('dialog', (dialog) => {
    message = dialog.message();
    dialog.dismiss();
  });
  await page.click('#apply');
  await page.waitForFunction(() => !document.querySelector('#apply').disabled);
  assert.match(message, /THIS DELETES 1 AND ARCHIVES 0 OBJECT/);
  assert.equal((await server.ok(token, 'flavors/list', {})).items.length, flavors, 'dismissed: nothing applied');
  await page.uncheck('#prune');
  assert.deepEqual(problems, []);
});

test('YAML documents plan as their JSON twins; an empty value shows as ""', async () => {
  const { page, problems } = await open();
  const exported = (await server.ok(token, 'fleet/export', {})).document;
  const json = structuredClone(exported);
  json.sites.lab.description = 'Lab in Berlin';
  await edit(page, json);
  const fromJson = await shown(page);
  const yaml = asYaml(json);
  await edit(page, yaml);
  const fromYaml = await shown(page);
  assert.equal(fromYaml.hash, fromJson.hash);
  assert.equal(fromYaml.json, fromJson.json);
  const fields = await page.locator('.change .fields').allTextContents();
  assert.ok(fields.some((field) => field.includes('description: "" -> Lab in Berlin')), fields.join('\n'));
  // A key twice in JSON is refused in the browser, as on the server.
  await edit(page, '{"sites": {"lab": {"region": "a", "region": "b"}}}');
  assert.match(await page.locator('#errors').textContent(), /\/document\/sites\/lab\/region/);
  assert.deepEqual(problems, []);
});

test('a document opened from a file or dropped on the editor is planned', async () => {
  const { page, problems } = await open();
  const exported = (await server.ok(token, 'fleet/export', {})).document;
  const opened = structuredClone(exported);
  opened.pools['gpu-a'].gpus = 72;
  const yaml = asYaml(opened);
  await page.setInputFiles('#file', { name: 'estate.yaml', mimeType: 'text/yaml', buffer: Buffer.from(yaml) });
  await page.locator('#plan-intent', { hasText: 'Planning estate.yaml.' }).waitFor();
  const gpus = exported.pools['gpu-a'].gpus;
  await page.locator('.change .text', { hasText: `~ pool gpu-a: update (gpus ${gpus} -> 72)` }).waitFor();
  assert.equal(await page.locator('#document').inputValue(), yaml);

  const dropped = structuredClone(exported);
  dropped.pools['gpu-a'].gpus = 80;
  const transfer = await page.evaluateHandle((text) => {
    const data = new DataTransfer();
    data.items.add(new File([text], 'dropped.json', { type: 'application/json' }));
    return data;
  }, JSON.stringify(dropped, null, 2));
  await page.dispatchEvent('#document', 'drop', { dataTransfer: transfer });
  await page.locator('#plan-intent', { hasText: 'Planning dropped.json.' }).waitFor();
  await page.locator('.change .text', { hasText: `~ pool gpu-a: update (gpus ${gpus} -> 80)` }).waitFor();
  const view = await shown(page);
  const server_plan = await server.call(token, 'fleet/plan', { document: dropped, prune: false });
  assert.equal(view.hash, server_plan.json.planHash);
  assert.deepEqual(problems, []);
});

test('an apply refused with CONFIG_DRIFT says what moved', async () => {
  const { page, problems } = await open();
  const exported = (await server.ok(token, 'fleet/export', {})).document;
  const edited = structuredClone(exported);
  edited.ownerQuotas['team-ml'].instances = 70;
  await edit(page, edited);
  // Someone changes the estate behind the page's snapshot.
  const quota = await server.ok(token, 'quotas/get', { owner: 'team-ml' });
  await server.ok(token, 'quotas/set', { owner: 'team-ml', vcpus: quota.vcpus, memoryMib: quota.memoryMib,
    gpus: quota.gpus, instances: 80 });
  page.once('dialog', (dialog) => dialog.accept());
  await page.click('#apply');
  await page.locator('#outcome', { hasText: 'the estate changed since this plan was made' }).waitFor();
  const outcome = await page.locator('#outcome').textContent();
  assert.match(outcome, /instances \d+ -> 70/);
  assert.match(outcome, /now: +~ ownerQuota team-ml: update \(instances 80 -> 70\)/);
  assert.doesNotMatch(outcome, /sha256:/, 'what moved, not hashes');
  // The browser logs the refused request itself; nothing else went wrong.
  assert.deepEqual(problems.filter((problem) => !problem.includes('status of 409')), []);
});

test('a document with a plugin section plans in the browser to the server planHash', async () => {
  // The plugin the workspace builds beside the binary, which the build transpiled (console/build.sh).
  const plugin = join(dirname(FLEET_BIN), 'plugins', 'reservations.wasm');
  const withPlugin = await startServer(['--plugin', plugin]);
  try {
    const own = withPlugin.tenantWithToken('acme');
    await withPlugin.ok(own, 'fleet/apply', { document: estate() });
    const { page, problems } = await open(withPlugin, own);
    const exported = (await withPlugin.ok(own, 'fleet/export', {})).document;
    const edited = structuredClone(exported);
    edited.reservations = {
      'ml-week': { pool: 'gpu-a', owner: 'team-research', vcpus: 8, gpus: 1,
        startsAt: '2026-12-01T00:00:00Z', endsAt: '2026-12-08T00:00:00Z', note: 'quarter end' },
      backwards: { pool: 'gpu-a', owner: 'team-research', startsAt: '2026-12-08T00:00:00Z',
        endsAt: '2026-12-01T00:00:00Z' },
    };
    await edit(page, edited);
    const view = await shown(page);
    const planned = await withPlugin.call(own, 'fleet/plan', { document: edited, prune: false });
    assert.equal(planned.status, 200);
    assert.equal(planned.json.summary.blocked, 1, planned.text);
    assert.equal(planned.json.blocked[0].reason, 'endsAt must be later than startsAt');
    assert.equal(view.hash, planned.json.planHash, 'the browser ran the plugin check as the server did');
    assert.equal(view.json, planned.text, 'the browser plan is the server plan, byte for byte');
    assert.ok(view.lines.some((line) => line.startsWith('+ reservation ml-week: create (pool gpu-a')), view.lines.join('\n'));
    await page.screenshot({ path: join(ARTIFACTS, 'plan-plugin.png'), fullPage: true });
    assert.deepEqual(problems, []);
  } finally {
    await withPlugin.stop();
  }
});
