// The preview host: the fleet planner component (transpiled by jco) run in JavaScript,
// with the WIT module adapters supplied from one state snapshot.
//
// A browser is a host without composite methods (SPEC §6.3): `compute:fleet/methods`
// answers `unsupported`, and `apply` here answers UNSUPPORTED without running the
// planner. The same module runs in Node.js (the tests) and in the page.

/** The version of the `compute:fleet` WIT package the component implements. */
const WIT_VERSION = '0.9.0';

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

/** Members of a snapshot that are not sections of objects. */
const NOT_SECTIONS = new Set(['caller', 'modules', 'bindings', 'plugins', 'policies']);

/** The interface a module plugin exports (`wit/module`), as jco names it. */
export const PLUGIN_EXPORT = 'compute:module/plugin@0.1.0';

/** Kinds of the snapshot when it names none: the six built-in ones. */
const BUILT_IN_KINDS = ['site', 'providerAccount', 'pool', 'ownerQuota', 'offer', 'flavor'];

/** Writes the state encoding of `wit/fleet.wit` (`state.snapshot`), growing as needed. */
class StateWriter {
  constructor() {
    this.bytes = new Uint8Array(1 << 16);
    this.view = new DataView(this.bytes.buffer);
    this.length = 0;
    this.utf8 = new TextEncoder();
  }

  reserve(count) {
    if (this.length + count <= this.bytes.length) return;
    let size = this.bytes.length * 2;
    while (size < this.length + count) size *= 2;
    const bytes = new Uint8Array(size);
    bytes.set(this.bytes.subarray(0, this.length));
    this.bytes = bytes;
    this.view = new DataView(bytes.buffer);
  }

  u8(value) {
    this.reserve(1);
    this.bytes[this.length++] = value;
  }

  u32(value) {
    this.reserve(4);
    this.view.setUint32(this.length, value, true);
    this.length += 4;
  }

  u64(value) {
    this.reserve(8);
    this.view.setBigUint64(this.length, BigInt(value), true);
    this.length += 8;
  }

  str(text) {
    const encoded = this.utf8.encode(text);
    this.u32(encoded.length);
    this.reserve(encoded.length);
    this.bytes.set(encoded, this.length);
    this.length += encoded.length;
  }

  /** One value, its type told by its JSON type (strings, counts, booleans, maps). */
  value(value, where) {
    if (typeof value === 'string') {
      this.u8(0);
      this.str(value);
    } else if (typeof value === 'number' && Number.isSafeInteger(value) && value >= 0) {
      this.u8(1);
      this.u64(value);
    } else if (typeof value === 'boolean') {
      this.u8(2);
      this.u8(value ? 1 : 0);
    } else if (value !== null && typeof value === 'object' && !Array.isArray(value)) {
      const pairs = Object.entries(value).sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
      this.u8(3);
      this.u32(pairs.length);
      for (const [key, text] of pairs) {
        if (typeof text !== 'string') throw new PlannerError('INVALID_ARGUMENT', `${where}: map values are strings`);
        this.str(key);
        this.str(text);
      }
    } else {
      throw new PlannerError('INVALID_ARGUMENT', `${where} has a value of no field type`);
    }
  }

  finish() {
    return this.bytes.slice(0, this.length);
  }
}

/**
 * The state encoding of a snapshot in the JSON form of `compute.preview.snapshot`: every
 * section an array of objects as the API writes them. The encoding is self-describing,
 * so this needs no knowledge of the kinds: the planner checks every column against its
 * own descriptors, and absent fields take their defaults there.
 */
export function encodeState(snapshot) {
  const writer = new StateWriter();
  writer.u8(2);
  const modules = snapshot.modules ?? BUILT_IN_KINDS;
  writer.u32(modules.length);
  for (const kind of modules) writer.str(kind);
  const sections = Object.entries(snapshot).filter(([name]) => !NOT_SECTIONS.has(name));
  writer.u32(sections.length);
  for (const [section, objects] of sections) {
    if (!Array.isArray(objects)) throw new PlannerError('INVALID_ARGUMENT', `section ${section} must be an array`);
    const names = [...new Set(objects.flatMap((object) => Object.keys(object)))];
    const column = new Map(names.map((name, index) => [name, index]));
    writer.str(section);
    writer.u32(names.length);
    for (const name of names) writer.str(name);
    writer.u32(objects.length);
    for (const object of objects) {
      const entries = Object.entries(object);
      writer.u32(entries.length);
      for (const [name, value] of entries) {
        writer.u32(column.get(name));
        writer.value(value, `${section}: ${name}`);
      }
    }
  }
  const bindings = snapshot.bindings ?? [];
  writer.u32(bindings.length);
  for (const { kind, name, id } of bindings) {
    writer.str(kind);
    writer.str(name);
    writer.str(id);
  }
  // The policies in force (SPEC §14), judged by the planner itself.
  const policies = snapshot.policies ?? [];
  writer.u32(policies.length);
  for (const { name, level, source } of policies) {
    writer.str(name);
    writer.str(level);
    writer.str(source);
  }
  return writer.finish();
}

/**
 * The `compute:fleet/plugins` import: the snapshot's plugin kinds, and their checks run
 * by the plugins' own components (transpiled by jco, instantiated by the page),
 * `plugins` mapping a kind to its plugin's `compute:module/plugin` export. A kind with
 * no plugin here, or a plugin that throws or answers garbage, is the plan's error.
 */
function pluginAdapters(snapshot, plugins) {
  const kinds = JSON.stringify((snapshot.plugins ?? []).map(({ descriptor }) => descriptor));
  const failure = (message) => ({ tag: 'err', val: { code: 'internal', message, details: '' } });
  return {
    kinds: () => kinds,
    check: (kind, subjects) => {
      const plugin = plugins.get(kind);
      if (!plugin) return failure(`no plugin for the kind ${kind} is loaded in this page`);
      let problems;
      try {
        problems = plugin.check(
          subjects.map(({ object, previous, references }) => ({
            object,
            previous: previous ?? undefined,
            references: references.map(([field, referenced]) => ({ field, object: referenced })),
          })),
        );
      } catch (thrown) {
        return failure(`plugin ${kind} failed: ${thrown?.message ?? thrown}`);
      }
      const garbage = !Array.isArray(problems) || problems.some(
        (problem) => !(problem.subject < subjects.length) || typeof problem.path !== 'string' ||
          typeof problem.message !== 'string',
      );
      if (garbage) return failure(`plugin ${kind} answered its check with garbage`);
      return { tag: 'ok', val: problems.map(({ subject, path, message }) => ({ subject, path, message })) };
    },
  };
}

/**
 * The `compute:fleet/output` import: the result of the call in progress, collected a
 * chunk at a time. `take()` returns it as text and starts the next.
 */
export class Output {
  constructor() {
    this.chunks = [];
    this.write = (chunk) => {
      // jco hands over a copy of the guest's bytes; keep it as it is.
      this.chunks.push(chunk);
    };
  }

  take() {
    const decoder = new TextDecoder('utf-8', { fatal: true });
    const text = this.chunks.map((chunk) => decoder.decode(chunk, { stream: true })).join('') + decoder.decode();
    this.chunks = [];
    return text;
  }
}

/**
 * The `compute:fleet/state`, `compute:fleet/methods`, `compute:fleet/plugins`,
 * `compute:fleet/output` and `compute:fleet/digest` imports, answered from a snapshot
 * in the JSON form of `compute.preview.snapshot`, encoded once, the page's plugin
 * instances (a Map of kind to plugin export), and where results go (an `Output`).
 */
export function adapters(snapshot, plugins = new Map(), output = new Output()) {
  const state = encodeState(snapshot);
  // The caller's grants, when the snapshot says them, block at plan time what it may not do.
  const grants = Array.isArray(snapshot.caller?.grants) ? [...snapshot.caller.grants] : undefined;
  const caller = { tenant: snapshot.caller?.tenant ?? '', principal: snapshot.caller?.principal ?? '', grants };
  // A fresh copy per call: the planner owns what it is given.
  const imports = {
    currentCaller: () => ({ ...caller, grants: caller.grants && [...caller.grants] }),
    snapshot: () => state.slice(),
    // The page has no budget to name a policy for: nothing to do.
    judging: () => {},
    // Plans only: apply is not run here.
    approval: () => 'verdicts',
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
  const pluginImports = pluginAdapters(snapshot, plugins);
  // A page has no synchronous SHA-256 faster than the planner's own (WebCrypto's is
  // asynchronous): the planner computes its digests itself, the same digests.
  const noDigest = () => {
    throw new Error('the browser preview computes no SHA-256 for the planner');
  };
  const digest = { hasSha256: () => false, sha256Update: noDigest, sha256Finish: noDigest };
  // jco's bindings look imports up by the unversioned name; its typings use the
  // versioned one. Both point at the same adapters.
  return {
    'compute:fleet/state': imports,
    [`compute:fleet/state@${WIT_VERSION}`]: imports,
    'compute:fleet/methods': methods,
    [`compute:fleet/methods@${WIT_VERSION}`]: methods,
    'compute:fleet/plugins': pluginImports,
    [`compute:fleet/plugins@${WIT_VERSION}`]: pluginImports,
    'compute:fleet/output': output,
    [`compute:fleet/output@${WIT_VERSION}`]: output,
    'compute:fleet/digest': digest,
    [`compute:fleet/digest@${WIT_VERSION}`]: digest,
  };
}

/**
 * Instantiates the module plugins a snapshot names, each transpiled by jco (as
 * `preview/build.sh` does) into a directory named by the plugin file's SHA-256:
 * `load(digest)` returns `[componentModule, getCoreModule]` for that directory.
 * Returns the Map of kind to plugin export that `loadPlanner` takes.
 */
export async function loadPlugins(snapshot, load) {
  const plugins = new Map();
  for (const { descriptor, digest } of snapshot.plugins ?? []) {
    const [module, getCoreModule] = await load(digest);
    const root = await module.instantiate(getCoreModule, {});
    plugins.set(descriptor.kind, root.plugin ?? root[PLUGIN_EXPORT]);
  }
  return plugins;
}

/**
 * Calls an export and returns what it wrote to `output`, or turns a WIT `error` into a
 * PlannerError (what it wrote then is no result).
 */
function call(entry, request, output) {
  output.take();
  try {
    entry(request);
    return output.take();
  } catch (thrown) {
    output.take();
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
 * `getCoreModule(name)` returns (a promise of) the compiled core module `name`;
 * `plugins` maps the snapshot's plugin kinds to their instances (`loadPlugins`).
 * Returns a host with `plan`, `export` and `apply`, each taking the request JSON text
 * and returning the planner's JSON text unchanged (or throwing a PlannerError).
 *
 * A component instance is cheap to keep: the planner keeps nothing between calls, and
 * every call reads the state afresh through the adapters.
 */
export async function loadPlanner(componentModule, getCoreModule, snapshot, plugins = new Map()) {
  const output = new Output();
  const root = await componentModule.instantiate(getCoreModule, adapters(snapshot, plugins, output));
  const planner = root.planner ?? root[`compute:fleet/planner@${WIT_VERSION}`];
  return {
    plan: (request) => call(planner.plan, request, output),
    export: (request) => call(planner.export, request, output),
    apply: () => {
      throw new PlannerError(
        'UNSUPPORTED',
        'the browser preview cannot apply: it has no composite methods; apply through the server',
      );
    },
  };
}
