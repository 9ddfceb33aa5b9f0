//! Builds the planner component: `guest/` for `wasm32-unknown-unknown`, encoded with
//! wit-component into `$OUT_DIR/fleet_planner.wasm`, which the host embeds. The hostile
//! test guest (`test-programs/hostile`) is built the same way, for the sandbox tests.

use std::env;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, bail};

const TARGET: &str = "wasm32-unknown-unknown";

fn main() -> Result<()> {
    let manifest_dir = PathBuf::from(env::var("CARGO_MANIFEST_DIR")?);
    let workspace = manifest_dir.parent().context("host/ has a parent")?.to_path_buf();
    let out_dir = PathBuf::from(env::var("OUT_DIR")?);

    for watched in ["guest/src", "guest/build.rs", "guest/Cargo.toml", "test-programs/hostile", "wit", "Cargo.lock"] {
        println!("cargo:rerun-if-changed={}", workspace.join(watched).display());
    }

    ensure_wasm_target()?;
    let modules = build_guests(&workspace, &out_dir)?;
    for (crate_name, component_name) in [("fleet_guest", "fleet_planner"), ("fleet_hostile_guest", "fleet_hostile")] {
        let module = modules.join(format!("{crate_name}.wasm"));
        let component = wit_component::ComponentEncoder::default()
            .module(&std::fs::read(&module).with_context(|| format!("reading {}", module.display()))?)?
            .validate(true)
            .encode()
            .with_context(|| format!("encoding {component_name}"))?;
        std::fs::write(out_dir.join(format!("{component_name}.wasm")), component)?;
    }
    Ok(())
}

/// Adds the wasm target when the toolchain lacks it: fresh machines do, and with
/// `RUSTUP_AUTO_INSTALL=0` the `targets` of `rust-toolchain.toml` are not installed alone.
fn ensure_wasm_target() -> Result<()> {
    let rustc = env::var("RUSTC").unwrap_or_else(|_| "rustc".into());
    let sysroot = Command::new(&rustc).args(["--print", "sysroot"]).output()?;
    let sysroot = PathBuf::from(String::from_utf8(sysroot.stdout)?.trim());
    if sysroot.join("lib/rustlib").join(TARGET).exists() {
        return Ok(());
    }
    println!("cargo:warning=adding the {TARGET} target with rustup");
    let mut rustup = Command::new("rustup");
    rustup.args(["target", "add", TARGET]);
    if let Ok(toolchain) = env::var("RUSTUP_TOOLCHAIN") {
        rustup.args(["--toolchain", &toolchain]);
    }
    let status = rustup.status().context("running rustup to add the wasm target")?;
    if !status.success() {
        bail!("`rustup target add {TARGET}` failed; install the target and build again");
    }
    Ok(())
}

/// Runs a nested cargo for the guests and returns the directory of their modules. It
/// needs its own target dir (the outer build holds the lock of ours) and none of the
/// outer build's flags or wrappers.
fn build_guests(workspace: &Path, out_dir: &Path) -> Result<PathBuf> {
    let cargo = env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let target_dir = out_dir.join("guest-target");
    let status = Command::new(cargo)
        .current_dir(workspace)
        .args(["build", "--release", "--locked", "-p", "fleet-guest", "-p", "fleet-hostile-guest", "--target", TARGET])
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
        .context("running cargo for the guest")?;
    if !status.success() {
        bail!("building the guest for {TARGET} failed");
    }
    Ok(target_dir.join(TARGET).join("release"))
}
