//! The compiled components kept on disk between runs: compiling costs tens of
//! milliseconds in release and seconds in debug builds.

use std::hash::{Hash, Hasher};
use std::path::Path;

use sha2::Digest;
use wasmtime::Engine;
use wasmtime::component::Component;

/// `component` compiled for `engine`, or the artifact compiled before from `cache_dir`.
/// The artifact is kept on disk named by the component's hash and the engine's
/// compatibility hash, with a checksum beside it. Only artifacts this host wrote, for
/// this exact component and engine configuration, are ever loaded.
pub fn compile(engine: &Engine, component: &[u8], cache_dir: Option<&Path>, label: &str) -> anyhow::Result<Component> {
    let Some(cache_dir) = cache_dir else {
        return Ok(Component::new(engine, component)?);
    };
    let mut hasher = std::hash::DefaultHasher::new();
    engine.precompile_compatibility_hash().hash(&mut hasher);
    let key = format!("{}-{:016x}", &sha256_hex(component)[..32], hasher.finish());
    let artifact = cache_dir.join(format!("{label}-{key}.cwasm"));
    let checksum = artifact.with_extension("sha256");
    if let (Ok(bytes), Ok(expected)) = (std::fs::read(&artifact), std::fs::read_to_string(&checksum))
        && sha256_hex(&bytes) == expected.trim()
    {
        // SAFETY: wasmtime runs deserialized code as is. These bytes are an artifact
        // this host serialized itself for this component and engine configuration (the
        // file name), and they match the checksum it wrote beside them.
        #[expect(unsafe_code, reason = "loading our own precompiled artifact")]
        match unsafe { Component::deserialize(engine, &bytes) } {
            Ok(component) => return Ok(component),
            Err(error) => tracing::warn!(%error, path = %artifact.display(), "ignoring an unusable cached artifact"),
        }
    }
    let compiled = Component::new(engine, component)?;
    if let Err(error) = write_artifact(cache_dir, &artifact, &checksum, &compiled) {
        tracing::warn!(%error, dir = %cache_dir.display(), "cannot cache the compiled {label}");
    }
    Ok(compiled)
}

fn write_artifact(cache_dir: &Path, artifact: &Path, checksum: &Path, component: &Component) -> anyhow::Result<()> {
    std::fs::create_dir_all(cache_dir)?;
    let bytes = component.serialize()?;
    let unique = format!("{}.{}", std::process::id(), rand::random::<u64>());
    let temporary = artifact.with_extension(format!("cwasm.{unique}"));
    std::fs::write(&temporary, &bytes)?;
    std::fs::rename(&temporary, artifact)?;
    let temporary = checksum.with_extension(format!("sha256.{unique}"));
    std::fs::write(&temporary, sha256_hex(&bytes))?;
    std::fs::rename(&temporary, checksum)?;
    Ok(())
}

pub fn sha256_hex(bytes: &[u8]) -> String {
    data_encoding::HEXLOWER.encode(&sha2::Sha256::digest(bytes))
}
