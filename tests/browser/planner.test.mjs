// The transpiled planner in Node.js, with the console's host adapters: every golden
// case of guest/tests/plans plans as the native planner does, and that host
// has no composite methods (SPEC §6.3).

import assert from 'node:assert/strict';
import { readFileSync, readdirSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';

import { Output, PlannerError, adapters, loadPlanner } from '../../console/planner.js';
import { REPO, componentInNode } from './support.mjs';

const PLANS = join(REPO, 'guest/tests/plans');
/** The fewest golden cases there are, as the planner's own list says (`guest/src/golden.rs`). */
const GOLDEN_MINIMUM = Number(readFileSync(join(REPO, 'guest/src/golden.rs'), 'utf8').match(/pub const MINIMUM: usize = (\d+);/)[1]);
const { module, getCoreModule } = await componentInNode();

/** What the golden files hold for a result: the output, or `{"error": {...}}`. */
function outcome(run) {
  try {
    return JSON.parse(run());
  } catch (error) {
    if (!(error instanceof PlannerError)) throw error;
    const body = { code: error.code, message: error.message };
    if (error.details !== undefined) body.details = error.details;
    return { error: body };
  }
}

test('every golden plan comes out of the transpiled component unchanged', async () => {
  const cases = readdirSync(PLANS).sort();
  assert.ok(cases.length >= GOLDEN_MINIMUM, `${cases.length} golden cases in guest/tests/plans`);
  for (const name of cases) {
    const read = (file) => readFileSync(join(PLANS, name, file), 'utf8');
    const state = JSON.parse(read('state.json'));
    const planner = await loadPlanner(module, getCoreModule, state);
    assert.deepEqual(outcome(() => planner.plan(read('request.json'))), JSON.parse(read('expected.json')), name);
    let exported;
    try {
      exported = read('export.json');
    } catch {
      continue;
    }
    assert.deepEqual(outcome(() => planner.export('{}')), JSON.parse(exported), `${name} (export)`);
  }
});

test('the console host answers apply with UNSUPPORTED', async () => {
  const state = JSON.parse(readFileSync(join(PLANS, 'create-all/state.json'), 'utf8'));
  const planner = await loadPlanner(module, getCoreModule, state);
  assert.throws(() => planner.apply('{}'), { name: 'PlannerError', code: 'UNSUPPORTED' });
});

test('methods.invoke answers unsupported, so even the raw component cannot apply here', async () => {
  const read = (file) => readFileSync(join(PLANS, 'create-all', file), 'utf8');
  const imports = adapters(JSON.parse(read('state.json')));
  assert.equal(imports['compute:fleet/methods'].invoke('compute.sites.create', '{}').val.code, 'unsupported');
  const root = await module.instantiate(getCoreModule, imports);
  assert.throws(() => root.planner.apply(read('request.json')), (error) => error.payload?.code === 'unsupported');
});

test('the state crosses as one byte array and counts up to 2^53 - 1 come back exact', async () => {
  const top = 2 ** 53 - 1;
  const state = {
    caller: { tenant: 'acme', principal: 'alice' },
    ownerQuotas: [{ owner: 'team-ml', vcpus: top, memoryMib: 0, gpus: 1, instances: 2 }],
  };
  assert.ok(adapters(state)['compute:fleet/state'].snapshot() instanceof Uint8Array);
  const planner = await loadPlanner(module, getCoreModule, state);
  const exported = JSON.parse(planner.export('{}'));
  assert.equal(exported.document.ownerQuotas['team-ml'].vcpus, top);
});

test('the planner checks the state against its own kinds', async () => {
  const wrong = { caller: { tenant: 'acme', principal: 'alice' }, pools: [{ id: 'pool_x', gpus: 'many' }] };
  const planner = await loadPlanner(module, getCoreModule, wrong);
  assert.throws(() => planner.export('{}'), (error) => error.code === 'INTERNAL' && /wrong type/.test(error.message));
  assert.throws(() => adapters({ caller: {}, pools: [{ id: 'p', vcpus: -1 }] }), { code: 'INVALID_ARGUMENT' });
});

test('a result larger than a chunk comes back whole', async () => {
  const sites = Array.from({ length: 3000 }, (_, n) => ({
    id: `site_${String(n).padStart(26, 'a')}`,
    region: `région-ü-€-${n}`,
  }));
  const state = { caller: { tenant: 'acme', principal: 'alice' }, sites };
  const output = new Output();
  const root = await module.instantiate(getCoreModule, adapters(state, new Map(), output));
  root.planner.export('{}');
  assert.ok(output.chunks.length > 1, `the export came in ${output.chunks.length} chunk(s)`);
  const regions = Object.values(JSON.parse(output.take()).document.sites).map((site) => site.region).sort();
  assert.deepEqual(regions, sites.map((site) => site.region).sort());
  assert.equal(output.take(), '', 'taking the result starts the next');
});

test('a character split between two chunks is decoded whole', () => {
  const output = new Output();
  const bytes = new TextEncoder().encode('"€"');
  output.write(bytes.slice(0, 2));
  output.write(bytes.slice(2));
  assert.equal(output.take(), '"€"');
});
