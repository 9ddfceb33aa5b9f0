// Behaviour tests of the maintenance-windows plugin, run in Node.js through jco.
//
//   node plugins/maintenance-windows/test.mjs OUT.wasm   (transpiles it with jco first)
//   node plugins/maintenance-windows/test.mjs DIR        (a `jco transpile --instantiation async` output)
//
// jco comes from console/node_modules (`npm ci` in console/), or JCO=/path/to/jco.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readdirSync, readFileSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { test } from 'node:test';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { setFlagsFromString } from 'node:v8';

// componentize-py's CPython uses extended constant expressions, on by default from Node 22 only.
setFlagsFromString('--experimental-wasm-extended-const');

const PLUGIN = 'compute:module/plugin@0.1.0';
const repo = resolve(fileURLToPath(import.meta.url), '../../..');

async function load(path) {
  let dir = path;
  if (!statSync(path).isDirectory()) {
    dir = mkdtempSync(join(tmpdir(), 'mw-plugin-'));
    process.on('exit', () => rmSync(dir, { recursive: true, force: true }));
    const jco = process.env.JCO ?? join(repo, 'console/node_modules/.bin/jco');
    const run = spawnSync(jco, ['transpile', path, '-o', dir, '--name', 'plugin',
      '--instantiation', 'async', '--no-wasi-shim', '--no-typescript', '--quiet'], { stdio: 'inherit' });
    assert.equal(run.status, 0, `${jco} transpile failed`);
  }
  const entry = readdirSync(dir).filter((f) => f.endsWith('.js'));
  assert.equal(entry.length, 1, `one .js file expected in ${dir}, found ${entry}`);
  const { instantiate } = await import(pathToFileURL(join(dir, entry[0])));
  const getCoreModule = (name) => WebAssembly.compile(readFileSync(join(dir, name)));
  // The only import is the type-only `compute:module/types` interface: nothing to give.
  const root = await instantiate(getCoreModule, {});
  assert.equal(root.plugin, root[PLUGIN]); // jco also names it by its short name
  return root[PLUGIN];
}

if (process.argv.length !== 3) {
  console.error('usage: node test.mjs OUT.wasm|TRANSPILED_DIR');
  process.exit(2);
}
const plugin = await load(resolve(process.argv[2]));

function subject(startsAt, endsAt, extra = {}) {
  const object = { id: 'mw_00000000000000000000000000', site: 'site_0000000000000000000000000a',
    startsAt, endsAt, reason: '', drain: false };
  return { object: JSON.stringify(object), previous: undefined, references: [], ...extra };
}
const check = (...subjects) => plugin.check(subjects);
const notUtc = (field, value) => {
  const shown = value.length > 64 ? `${value.slice(0, 61)}...` : value; // long values are cut
  return `${field} must be an RFC 3339 UTC time (YYYY-MM-DDTHH:MM:SSZ), not ${JSON.stringify(shown)}`;
};

test('describe gives the kind', () => {
  const string = { tag: 'string' };
  assert.deepEqual(plugin.describe(), {
    group: 'maintenance',
    kind: 'maintenanceWindow',
    section: 'maintenanceWindows',
    idPrefix: 'mw',
    removal: 'delete',
    fields: [
      { name: 'site', type: { tag: 'ref', val: 'site' }, required: true, immutable: true },
      { name: 'startsAt', type: string, required: true, immutable: false },
      { name: 'endsAt', type: string, required: true, immutable: false },
      { name: 'reason', type: string, required: false, immutable: false },
      { name: 'drain', type: { tag: 'bool' }, required: false, immutable: false },
    ],
  });
});

test('valid windows have no problems', () => {
  assert.deepEqual(check(), []);
  assert.deepEqual(check(
    subject('2026-12-01T02:00:00Z', '2026-12-01T06:00:00Z'),
    subject('2026-12-01T02:00:00.25Z', '2026-12-01T02:00:00.250000001Z'),
    subject('2028-02-29T00:00:00Z', '2028-03-07T00:00:00Z'), // leap day, exactly 7 days
    subject('2026-12-31T23:00:00Z', '2027-01-01T01:00:00Z', {
      previous: JSON.stringify({ id: 'mw_x', startsAt: 'garbage' }), // only the new state counts
      references: [{ field: 'site', object: '{"id":"site_x"}' }],
    }),
  ), []);
});

test('endsAt must be later than startsAt', () => {
  const later = { path: '/endsAt', message: 'endsAt must be later than startsAt' };
  assert.deepEqual(check(
    subject('2026-12-01T06:00:00Z', '2026-12-01T02:00:00Z'),
    subject('2026-12-01T02:00:00Z', '2026-12-01T02:00:00.000Z'),
  ), [{ subject: 0, ...later }, { subject: 1, ...later }]);
});

test('times must be RFC 3339 UTC', () => {
  const bad = [
    '2026-12-01T02:00:00+01:00', '2026-12-01T02:00:00+00:00', '2026-12-01 02:00:00Z',
    '2026-12-01T02:00Z', '2026-12-01T02:00:00', '2026-12-01T02:00:00.Z', 'tomorrow', '',
    '２026-12-01T02:00:00Z', '2026-12-01T02:00:00Z\n',
  ];
  for (const value of bad) {
    assert.deepEqual(check(subject(value, '2026-12-01T06:00:00Z')),
      [{ subject: 0, path: '/startsAt', message: notUtc('startsAt', value) }], value);
  }
  assert.deepEqual(check(subject('next week', 'never')), [
    { subject: 0, path: '/startsAt', message: notUtc('startsAt', 'next week') },
    { subject: 0, path: '/endsAt', message: notUtc('endsAt', 'never') },
  ]);
});

test('dates and times must exist', () => {
  const cases = [
    ['2026-02-30T02:00:00Z', 'no such date'], ['2026-02-29T02:00:00Z', 'no such date'],
    ['2100-02-29T02:00:00Z', 'no such date'], ['2026-13-01T02:00:00Z', 'no such date'],
    ['2026-04-31T02:00:00Z', 'no such date'], ['2026-12-00T02:00:00Z', 'no such date'],
    ['2026-12-01T24:00:00Z', 'no such time'], ['2026-12-01T02:60:00Z', 'no such time'],
    ['2026-12-31T23:59:60Z', 'no such time'], // leap seconds are refused
    ['2026-12-01T02:00:00.0000000001Z', 'at most 9 fractional digits'],
    [`2026-12-01T02:00:00.${'1'.repeat(5000)}Z`, 'at most 9 fractional digits'],
  ];
  for (const [value, why] of cases) {
    assert.deepEqual(check(subject('2026-01-01T00:00:00Z', value)),
      [{ subject: 0, path: '/endsAt', message: `${notUtc('endsAt', value)}: ${why}` }], value);
  }
});

test('a window lasts at most 7 days', () => {
  const tooLong = (hours) => ({ path: '/endsAt',
    message: `a maintenance window lasts at most 7 days (this one lasts ${hours} hours)` });
  assert.deepEqual(check(
    subject('2026-12-01T02:00:00Z', '2026-12-09T02:00:00Z'),
    subject('2026-12-01T02:00:00Z', '2026-12-08T02:00:00Z'),
    subject('2026-12-01T02:00:00Z', '2026-12-08T02:00:00.000000001Z'),
    subject('2026-12-28T00:00:00Z', '2027-01-04T12:30:00Z'),
  ), [{ subject: 0, ...tooLong('192') }, { subject: 2, ...tooLong('168.01') },
    { subject: 3, ...tooLong('180.5') }]);
});

test('problems name their subject in a mixed batch, deterministically', () => {
  const batch = [
    subject('2026-12-01T02:00:00Z', '2026-12-01T06:00:00Z'),
    subject('2026-02-30T02:00:00Z', '2026-12-01T06:00:00Z'),
    subject('2026-12-01T02:00:00Z', '2026-12-01T06:00:00Z'),
    subject('2026-12-01T06:00:00Z', '2026-12-01T02:00:00Z'),
    { object: 'not json', previous: undefined, references: [] },
    { object: '['.repeat(100000), previous: undefined, references: [] },
  ];
  const problems = plugin.check(batch);
  assert.deepEqual(problems.map((p) => [p.subject, p.path]),
    [[1, '/startsAt'], [3, '/endsAt'], [4, ''], [5, '']]);
  assert.deepEqual(plugin.check(batch), problems);
});
