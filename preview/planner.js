// The preview host: the fleet planner component (transpiled by jco) run in JavaScript,
// with the WIT module adapters supplied from one state snapshot.
//
// A browser is a host without composite methods (SPEC §6.3): `compute:fleet/methods`
// answers `unsupported`, and `apply` here answers UNSUPPORTED without running the
// planner. The same module runs in Node.js (the tests) and in the page.

/** Snapshot kind names (SPEC §2) to the WIT `kind` enum as jco represents it. */
const WIT_KINDS = {
  site: 'site',
  providerAccount: 'provider-account',
  pool: 'pool',
  ownerQuota: 'owner-quota',
  offer: 'offer',
  flavor: 'flavor',
};

const ALL_KINDS = Object.keys(WIT_KINDS);

/** The transpiled component's file names (`jco transpile --name fleet_planner`). */
export const COMPONENT_JS = 'fleet_planner.js';

/** An error in the shape of the API's error body: `{code, message, details?}`. */
export class PlannerError extends Error {
  constructor(code, message, details) {
    super(message);
    this.name = 'PlannerError';
    this.code = code;
    if (details !== undefined) this.details = details;
  }
}

/** `invalid-argument` -> `INVALID_ARGUMENT`. */
function apiCode(witCode) {
  return String(witCode).toUpperCase().replaceAll('-', '_');
}

// WIT u64 fields are BigInt in jco's bindings; the snapshot's numbers are at most
// 2^53 - 1 (SPEC §4), so they are exact as JSON numbers.
const u64 = (value) => BigInt(value ?? 0);
const str = (value) => value ?? '';
const stringMap = (map) => Object.entries(map ?? {}).sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));

function witKind(kind) {
  const wit = WIT_KINDS[kind];
  if (wit === undefined) throw new PlannerError('INVALID_ARGUMENT', `the snapshot names an unknown kind ${JSON.stringify(kind)}`);
  return wit;
}

/**
 * The `compute:fleet/state` and `compute:fleet/methods` imports, answered from a
 * snapshot in the `Snapshot` format of `compute.preview.snapshot`. Absent sections and
 * fields take the same defaults as the planner's own `Snapshot` (serde defaults).
 */
export function adapters(snapshot) {
  const tables = {
    sites: (snapshot.sites ?? []).map((site) => ({
      id: site.id,
      region: site.region,
      description: str(site.description),
      labels: stringMap(site.labels),
    })),
    providerAccounts: (snapshot.providerAccounts ?? []).map((account) => ({
      id: account.id,
      provider: account.provider,
      credentialsRef: str(account.credentialsRef),
      settings: stringMap(account.settings),
    })),
    pools: (snapshot.pools ?? []).map((pool) => ({
      id: pool.id,
      site: pool.site,
      account: pool.account,
      class: pool.class,
      owner: pool.owner,
      vcpus: u64(pool.vcpus),
      memoryMib: u64(pool.memoryMib),
      gpus: u64(pool.gpus),
      labels: stringMap(pool.labels),
      archived: Boolean(pool.archived),
    })),
    ownerQuotas: (snapshot.ownerQuotas ?? []).map((quota) => ({
      owner: quota.owner,
      vcpus: u64(quota.vcpus),
      memoryMib: u64(quota.memoryMib),
      gpus: u64(quota.gpus),
      instances: u64(quota.instances),
    })),
    offers: (snapshot.offers ?? []).map((offer) => ({
      id: offer.id,
      pool: offer.pool,
      toOwner: offer.to,
      vcpus: u64(offer.vcpus),
      memoryMib: u64(offer.memoryMib),
      gpus: u64(offer.gpus),
    })),
    flavors: (snapshot.flavors ?? []).map((flavor) => ({
      id: flavor.id,
      pool: flavor.pool,
      vcpus: u64(flavor.vcpus),
      memoryMib: u64(flavor.memoryMib),
      gpus: u64(flavor.gpus),
      diskGib: u64(flavor.diskGib),
      archived: Boolean(flavor.archived),
    })),
    bindings: (snapshot.bindings ?? []).map((binding) => ({
      kind: witKind(binding.kind),
      name: binding.name,
      id: binding.id,
    })),
  };
  const caller = { tenant: str(snapshot.caller?.tenant), principal: str(snapshot.caller?.principal) };
  const modules = (snapshot.modules ?? ALL_KINDS).map(witKind);
  // Fresh arrays per call: the planner owns what it is given.
  const state = {
    currentCaller: () => ({ ...caller }),
    modules: () => [...modules],
    sites: () => [...tables.sites],
    providerAccounts: () => [...tables.providerAccounts],
    pools: () => [...tables.pools],
    ownerQuotas: () => [...tables.ownerQuotas],
    offers: () => [...tables.offers],
    flavors: () => [...tables.flavors],
    bindings: () => [...tables.bindings],
  };
  const methods = {
    invoke: (method) => ({
      tag: 'err',
      val: {
        code: 'unsupported',
        message: `this host cannot run ${method}: the browser preview has no composite methods`,
        details: '',
      },
    }),
  };
  // jco's bindings look imports up by the unversioned name; its typings use the
  // versioned one. Both point at the same adapters.
  return {
    'compute:fleet/state': state,
    'compute:fleet/state@0.2.0': state,
    'compute:fleet/methods': methods,
    'compute:fleet/methods@0.2.0': methods,
  };
}

/** Calls an export and turns a WIT `error` into a PlannerError. */
function call(entry, request) {
  try {
    return entry(request);
  } catch (thrown) {
    const payload = thrown?.payload;
    if (payload && typeof payload === 'object' && 'code' in payload) {
      let details;
      if (payload.details) {
        try {
          details = JSON.parse(payload.details);
        } catch {
          details = { raw: payload.details };
        }
      }
      throw new PlannerError(apiCode(payload.code), payload.message, details);
    }
    // A trap: a planner bug or an exhausted resource, never bad input.
    throw new PlannerError('INTERNAL', `the planner trapped: ${thrown?.message ?? thrown}`);
  }
}

/**
 * Loads the transpiled component. `componentModule` is the imported `fleet_planner.js`;
 * `getCoreModule(name)` returns (a promise of) the compiled core module `name`.
 * Returns a host with `plan`, `export` and `apply`, each taking the request JSON text
 * and returning the planner's JSON text unchanged (or throwing a PlannerError).
 *
 * A component instance is cheap to keep: the planner keeps nothing between calls, and
 * every call reads the state afresh through the adapters.
 */
export async function loadPlanner(componentModule, getCoreModule, snapshot) {
  const root = await componentModule.instantiate(getCoreModule, adapters(snapshot));
  const planner = root.planner ?? root['compute:fleet/planner@0.2.0'];
  return {
    plan: (request) => call(planner.plan, request),
    export: (request) => call(planner.export, request),
    apply: () => {
      throw new PlannerError(
        'UNSUPPORTED',
        'the browser preview cannot apply: it has no composite methods; apply through the server',
      );
    },
  };
}
