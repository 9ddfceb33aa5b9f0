//! Builds the WebAssembly the host embeds or ships, with a nested cargo:
//!
//! - the planner component: `guest/` for `wasm32-unknown-unknown`, encoded with
//!   wit-component into `$OUT_DIR/fleet_planner.wasm`, which the host embeds; the
//!   hostile test planner (`test-programs/hostile`) the same way, for the sandbox tests;
//! - the example module plugins (SPEC §10), left at `target/<profile>/plugins/`:
//!   `reservations.wasm` (Rust, `plugins/reservations`) and `maintenance-windows.wasm`
//!   (Python, `plugins/maintenance-windows/build.sh`, which installs componentize-py
//!   when it is missing); and the hostile test plugin (`test-programs/hostile-plugin`);
//! - the edge component (`edge/`, SPEC §11) for `wasm32-wasip2`, which is a component
//!   as the compiler writes it: left at `target/<profile>/fleet-edge.wasm`;
//! - the console's assets (SPEC §16, §19): the planner and the example plugins
//!   transpiled by jco (`console/build.sh`) into `target/<profile>/console/` when Node.js
//!   and npm are installed, and a table of them the binary embeds (`console_assets.rs`).

use std::env;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, bail};

const TARGET: &str = "wasm32-unknown-unknown";
const EDGE_TARGET: &str = "wasm32-wasip2";

fn main() -> Result<()> {
    let manifest_dir = PathBuf::from(env::var("CARGO_MANIFEST_DIR")?);
    let workspace = manifest_dir.parent().context("host/ has a parent")?.to_path_buf();
    let out_dir = PathBuf::from(env::var("OUT_DIR")?);

    let watched = [
        "guest/src",
        "guest/Cargo.toml",
        "test-programs",
        "plugins",
        "edge",
        "wit",
        "Cargo.lock",
        "console/build.sh",
        "console/package-lock.json",
    ];
    for watched in watched {
        println!("cargo:rerun-if-changed={}", workspace.join(watched).display());
    }

    ensure_target(TARGET)?;
    ensure_target(EDGE_TARGET)?;
    // `$OUT_DIR` is `target/<profile>/build/fleet-<hash>/out`.
    let profile_dir = out_dir.ancestors().nth(3).context("OUT_DIR is inside target/<profile>")?.to_path_buf();
    let plugins_dir = profile_dir.join("plugins");
    std::fs::create_dir_all(&plugins_dir)?;
    let packages = ["fleet-guest", "fleet-hostile-guest", "fleet-plugin-reservations", "fleet-hostile-plugin"];
    let modules = build_guests(&workspace, TARGET, &packages)?;
    let components = [
        ("fleet_guest", out_dir.join("fleet_planner.wasm")),
        ("fleet_hostile_guest", out_dir.join("fleet_hostile.wasm")),
        ("fleet_plugin_reservations", plugins_dir.join("reservations.wasm")),
        ("fleet_hostile_plugin", out_dir.join("fleet_hostile_plugin.wasm")),
    ];
    for (crate_name, component) in components {
        let module = modules.join(format!("{crate_name}.wasm"));
        let encoded = wit_component::ComponentEncoder::default()
            .module(&std::fs::read(&module).with_context(|| format!("reading {}", module.display()))?)?
            .validate(true)
            .encode()
            .with_context(|| format!("encoding {crate_name}"))?;
        std::fs::write(&component, encoded)?;
    }
    println!("cargo:rustc-env=FLEET_PLUGINS_DIR={}", plugins_dir.display());
    println!("cargo:rustc-env=FLEET_HOSTILE_PLUGIN_WASM={}", out_dir.join("fleet_hostile_plugin.wasm").display());
    build_python_plugin(&workspace, &plugins_dir.join("maintenance-windows.wasm"));

    let edge = build_guests(&workspace, EDGE_TARGET, &["fleet-edge"])?.join("fleet_edge.wasm");
    let edge_out = out_dir.join("fleet-edge.wasm");
    std::fs::copy(&edge, &edge_out).with_context(|| format!("copying {}", edge.display()))?;
    println!("cargo:rustc-env=FLEET_EDGE_WASM={}", edge_out.display());
    std::fs::copy(&edge, profile_dir.join("fleet-edge.wasm"))?;

    let console_dir = profile_dir.join("console");
    let plugins = ["reservations.wasm", "maintenance-windows.wasm"].map(|name| plugins_dir.join(name));
    build_console(&workspace, &out_dir.join("fleet_planner.wasm"), &plugins, &console_dir);
    embed_console(&console_dir, &out_dir.join("console_assets.rs"))?;
    // The release binary's debug sections (line tables, which a panic's backtrace
    // reads) compressed: a fifth of their size (docs/release.md).
    if env::var("PROFILE").as_deref() == Ok("release") {
        println!("cargo:rustc-link-arg-bins=-Wl,--compress-debug-sections=zlib");
    }
    Ok(())
}

/// The console's built assets as a table the binary embeds (SPEC §19), by their names
/// under `/console/assets/`: the `.js`, `.mjs` and `.wasm` files of `dir` and of its
/// transpiled plugins' `plugins/<sha256>/`, each gzipped (into `OUT_DIR/console/`), as
/// a browser is sent them; a third of the size. Empty when they were not built.
fn embed_console(dir: &Path, out: &Path) -> anyhow::Result<()> {
    use std::io::Write as _;
    let served = |path: &Path| {
        path.is_file()
            && path.extension().is_some_and(|extension| ["js", "mjs", "wasm"].contains(&&*extension.to_string_lossy()))
    };
    let files = |dir: &Path| -> Vec<PathBuf> {
        let mut files: Vec<PathBuf> =
            std::fs::read_dir(dir).into_iter().flatten().flatten().map(|entry| entry.path()).collect();
        files.sort();
        files
    };
    let mut assets: Vec<(String, PathBuf)> = Vec::new();
    for file in files(dir).into_iter().filter(|file| served(file)) {
        assets.push((file.file_name().unwrap_or_default().to_string_lossy().into_owned(), file));
    }
    for plugin in files(&dir.join("plugins")).into_iter().filter(|plugin| plugin.is_dir()) {
        let digest = plugin.file_name().unwrap_or_default().to_string_lossy().into_owned();
        for file in files(&plugin).into_iter().filter(|file| served(file)) {
            let name = file.file_name().unwrap_or_default().to_string_lossy().into_owned();
            assets.push((format!("plugins/{digest}/{name}"), file));
        }
    }
    let gzipped = out.parent().unwrap_or(Path::new(".")).join("console");
    let _ = std::fs::remove_dir_all(&gzipped);
    std::fs::create_dir_all(&gzipped)?;
    let mut table = String::from(
        "/// The console's assets built with this binary, by name, gzipped.\npub static ASSETS: &[(&str, &[u8])] = &[\n",
    );
    for (index, (name, file)) in assets.iter().enumerate() {
        let gz = gzipped.join(format!("{index}.gz"));
        let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
        encoder.write_all(&std::fs::read(file).with_context(|| format!("reading {}", file.display()))?)?;
        std::fs::write(&gz, encoder.finish()?)?;
        table.push_str(&format!("    ({name:?}, include_bytes!({:?})),\n", gz.display().to_string()));
    }
    table.push_str("];\n");
    std::fs::write(out, table).with_context(|| format!("writing {}", out.display()))
}

/// The console's assets, by `console/build.sh` (jco, from the page's npm packages, which
/// it installs first when they are missing or older than the lock file). Without Node.js
/// and npm the build goes on without them (and says so); the server then says what to run.
fn build_console(workspace: &Path, component: &Path, plugins: &[PathBuf], out: &Path) {
    let source = workspace.join("console");
    let have = |tool: &str| Command::new(tool).arg("--version").stdout(std::process::Stdio::null()).status();
    if !matches!((have("node"), have("npm")), (Ok(node), Ok(npm)) if node.success() && npm.success()) {
        println!("cargo:warning=no Node.js and npm: the console's assets are not built (see docs/guide/console.md)");
        return;
    }
    let status = Command::new("bash")
        .arg(source.join("build.sh"))
        .args(plugins.iter().filter(|plugin| plugin.is_file()))
        .env("FLEET_COMPONENT", component)
        .env("CONSOLE_OUT", out)
        .stdout(std::process::Stdio::null())
        .status();
    match status {
        Ok(status) if status.success() => {}
        Ok(status) => println!("cargo:warning=console/build.sh failed ({status}): the console's assets are not built"),
        Err(error) => println!("cargo:warning=cannot run console/build.sh: {error}"),
    }
}

/// The example plugin in Python, built by its own script with componentize-py. Without
/// Python the build goes on without it (and says so); the tests that load it fail with
/// the reason.
fn build_python_plugin(workspace: &Path, out: &Path) {
    let source = workspace.join("plugins/maintenance-windows");
    let script = source.join("build.sh");
    // CPython components are not byte-for-byte reproducible, and each new one is
    // compiled anew by the server: build only when an input is newer than the output.
    let inputs = ["app.py", "build.sh", "requirements.txt"].map(|name| source.join(name));
    let modified = |path: &Path| std::fs::metadata(path).and_then(|metadata| metadata.modified()).ok();
    let newest_input =
        inputs.iter().chain([&workspace.join("wit/module/plugin.wit")]).filter_map(|p| modified(p)).max();
    if let (Some(built), Some(newest_input)) = (modified(out), newest_input)
        && built > newest_input
    {
        return;
    }
    let status = Command::new("bash")
        .arg(&script)
        .arg(out)
        .env("FLEET_TOOLS_DIR", workspace.join("target/plugin-tools"))
        .stdout(std::process::Stdio::null())
        .status();
    match status {
        Ok(status) if status.success() => {}
        Ok(status) => println!("cargo:warning={} failed ({status}): no maintenance-windows.wasm", script.display()),
        Err(error) => println!("cargo:warning=cannot run {}: {error}", script.display()),
    }
}

/// Adds a wasm target when the toolchain lacks it: fresh machines do, and with
/// `RUSTUP_AUTO_INSTALL=0` the `targets` of `rust-toolchain.toml` are not installed alone.
fn ensure_target(target: &str) -> Result<()> {
    let rustc = env::var("RUSTC").unwrap_or_else(|_| "rustc".into());
    let sysroot = Command::new(&rustc).args(["--print", "sysroot"]).output()?;
    let sysroot = PathBuf::from(String::from_utf8(sysroot.stdout)?.trim());
    if sysroot.join("lib/rustlib").join(target).exists() {
        return Ok(());
    }
    println!("cargo:warning=adding the {target} target with rustup");
    let mut rustup = Command::new("rustup");
    rustup.args(["target", "add", target]);
    if let Ok(toolchain) = env::var("RUSTUP_TOOLCHAIN") {
        rustup.args(["--toolchain", &toolchain]);
    }
    let status = rustup.status().context("running rustup to add the wasm target")?;
    if !status.success() {
        bail!("`rustup target add {target}` failed; install the target and build again");
    }
    Ok(())
}

/// Runs a nested cargo for `packages` and returns the directory of their modules. It
/// needs its own target dir (the outer build holds the lock of ours) and none of the
/// outer build's flags or wrappers. That dir is one for every outer build: the modules
/// are the same whatever the outer profile or flags, so clippy, the tests, the release
/// build and the fuzz targets (a workspace of their own) build them once between them.
fn build_guests(workspace: &Path, target: &str, packages: &[&str]) -> Result<PathBuf> {
    let cargo = env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let target_dir = workspace.join("target/components");
    let status = Command::new(cargo)
        .current_dir(workspace)
        .args(["build", "--release", "--locked", "--target", target])
        .args(packages.iter().flat_map(|package| ["-p", package]))
        .arg("--target-dir")
        .arg(&target_dir)
        .env_remove("CARGO_ENCODED_RUSTFLAGS")
        .env_remove("RUSTFLAGS")
        .env_remove("RUSTC_WRAPPER")
        .env_remove("RUSTC_WORKSPACE_WRAPPER")
        .env_remove("CARGO_TARGET_DIR")
        .env_remove("CARGO_BUILD_TARGET")
        // The planner is small and hot: optimize it whole, and ship no debug info.
        .env("CARGO_PROFILE_RELEASE_LTO", "true")
        .env("CARGO_PROFILE_RELEASE_CODEGEN_UNITS", "1")
        .env("CARGO_PROFILE_RELEASE_DEBUG", "false")
        .env("CARGO_PROFILE_RELEASE_STRIP", "true")
        .status()
        .context("running cargo for the guests")?;
    if !status.success() {
        bail!("building {packages:?} for {target} failed");
    }
    Ok(target_dir.join(target).join("release"))
}
