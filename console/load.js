// The page's assets: the planner component and the tenant's module plugins, as
// console/build.sh transpiled them (jco) into /console/assets/, fetched, compiled and
// instantiated over a snapshot; and js-yaml, which build.sh puts beside them. This runs
// in the page only; planner.js, the host it hands them to, runs in Node.js too.

import { COMPONENT_JS, loadPlanner, loadPlugins } from './planner.js';

const ASSETS = new URL('/console/assets/', location.href);

let componentModule = null;

/**
 * The `getCoreModule` of a transpiled component whose files are under `base`: each core
 * module is compiled once per page; instances are made per snapshot.
 */
function coreModulesAt(base) {
  const compiled = new Map();
  return (name) => {
    if (!compiled.has(name)) compiled.set(name, WebAssembly.compileStreaming(fetch(new URL(name, base))));
    return compiled.get(name);
  };
}

const getCoreModule = coreModulesAt(ASSETS);

/**
 * A module plugin transpiled by `console/build.sh` into `plugins/<digest>/`: its
 * component module and core modules, or an explanation of how to transpile it.
 */
async function importPlugin(digest) {
  const base = new URL(`plugins/${digest}/`, ASSETS);
  const url = new URL('plugin.js', base);
  const probe = await fetch(url, { method: 'GET', cache: 'no-cache' });
  if (!probe.ok) {
    const message = `a module plugin of this server (sha256 ${digest}) is not transpiled for the console: ` +
      'run console/build.sh with the plugin file';
    throw Object.assign(new Error(message), { missingAssets: true });
  }
  return [await import(url.href), coreModulesAt(base)];
}

/** Imports the transpiled component, or explains how to build it. */
async function importComponent() {
  if (componentModule) return componentModule;
  const url = new URL(COMPONENT_JS, ASSETS);
  const probe = await fetch(url, { method: 'GET', cache: 'no-cache' });
  if (!probe.ok) {
    const body = await probe.json().catch(() => ({}));
    throw Object.assign(new Error(body?.error?.message ?? `HTTP ${probe.status}`), { missingAssets: true });
  }
  componentModule = await import(url.href);
  return componentModule;
}

/**
 * A planner instance over `snapshot`, with its plugins. A failure to find the assets
 * carries `missingAssets` and says what to build.
 */
export async function newPlanner(snapshot) {
  const component = await importComponent();
  const plugins = await loadPlugins(snapshot, importPlugin);
  return loadPlanner(component, getCoreModule, snapshot, plugins);
}

/** js-yaml's ES module, which reads the YAML documents typed into the page. */
export const importYaml = () => import(new URL('js-yaml.mjs', ASSETS).href);
