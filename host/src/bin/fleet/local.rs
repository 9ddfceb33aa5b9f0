//! The commands that run here rather than against a server: `fleet serve`, the admin
//! commands on the database and its secret key, `fleet plugin inspect`, `fleet policy test` and
//! `fleet component`.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, Result, bail};
use fleet::calls::auth;
use fleet::{App, Config, db, demo};

/// The log on stderr: text, coloured only on a terminal (never with `NO_COLOR`), or one
/// JSON object per line.
pub fn logs(json: bool) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "fleet=info,warn".into());
    let colour = anstream::AutoStream::choice(&std::io::stderr()) != anstream::ColorChoice::Never;
    let logs = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr).with_ansi(colour);
    match json {
        true => logs.json().flatten_event(true).init(),
        false => logs.init(),
    }
}

/// `fleet serve`: everything that can refuse to start before listening; then the
/// banner (the demo's token, where the console is) and the server until a signal.
pub fn serve(config: Config, listen: String, demo: bool) -> Result<()> {
    let scheme = if config.tls.is_some() { "https" } else { "http" };
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    runtime.block_on(async {
        // Everything that can refuse to start (the database, plugins) before listening;
        // on a blocking thread, where the PostgreSQL client may run its own runtime.
        let app = tokio::task::spawn_blocking(move || App::new(config)).await??;
        let listener = tokio::net::TcpListener::bind(&listen)
            .await
            .with_context(|| format!("cannot listen on {listen}"))?;
        let address = listener.local_addr()?;
        if demo {
            let seeded = app.clone();
            let token =
                tokio::task::spawn_blocking(move || demo::seed(&seeded.core.dispatcher, &seeded.core.modules)).await??;
            println!("demo tenant {:?}, principal {:?}; token with every permission:", demo::TENANT, demo::PRINCIPAL);
            println!("  export FLEET_TOKEN={token}");
            println!(
                "  curl -s -X POST {scheme}://{address}/api/compute/fleet/export -H \"Authorization: Bearer $FLEET_TOKEN\""
            );
        }
        let console_dir = app.config.console_dir.as_deref();
        if fleet::http::console::is_built(console_dir) {
            println!("console: {scheme}://{address}/console (sign in with a token)");
        } else {
            println!("console: {}", console_build_hint(console_dir));
        }
        println!("fleet listening on {scheme}://{address}");
        fleet::app::serve(app, listener, fleet::app::shutdown_signal()).await
    })
}

/// `fleet admin tenant create`.
pub fn create_tenant(db_path: &Path, tenant: &str) -> Result<()> {
    let pool = db::open(db_path)?;
    auth::create_tenant(&pool.get()?, tenant, &db::now())?;
    println!("created tenant {tenant}");
    Ok(())
}

/// `fleet admin secret-key generate`: to a new file of its owner's only, or to stdout
/// when that is not a terminal (32 raw bytes are no text to show).
pub fn generate_secret_key(output: Option<&Path>) -> Result<()> {
    use std::io::{IsTerminal, Write};
    match output {
        Some(file) => {
            fleet::secrets::write_new_key(file)?;
            eprintln!(
                "wrote a new secret key to {}; serve with --secret-key-file {0}, and keep a copy where the \
                 database's backups are not: without it, the secrets they hold cannot be read",
                file.display()
            );
            Ok(())
        }
        None if std::io::stdout().is_terminal() => {
            bail!("a key is 32 raw bytes: write it to a file with -o FILE, or redirect stdout")
        }
        None => {
            let key = fleet::secrets::generate()?;
            let mut stdout = std::io::stdout().lock();
            stdout.write_all(&key)?;
            Ok(stdout.flush()?)
        }
    }
}

/// `fleet admin secret-key rotate`: every secret in the database sealed with the new key.
pub fn rotate_secret_key(db_path: &Path, old: &Path, new: &Path) -> Result<()> {
    let (old_key, new_key) = (fleet::secrets::Key::read(old)?, fleet::secrets::Key::read(new)?);
    if std::fs::read(old)? == std::fs::read(new)? {
        bail!("{} and {} hold the same key", old.display(), new.display());
    }
    let pool = db::open(db_path)?;
    let rotated = fleet::secrets::at_rest::rotate(&pool.get()?, &old_key, &new_key)?;
    println!(
        "encrypted {} secret(s) with the new key ({} were encrypted with the old key, {} unencrypted; {} had \
         the new key already); serve with --secret-key-file {}",
        rotated.resealed + rotated.encrypted,
        rotated.resealed,
        rotated.encrypted,
        rotated.already,
        new.display()
    );
    Ok(())
}

/// `fleet admin backup`.
pub fn backup(db_path: &Path, file: &Path) -> Result<()> {
    let copied = db::backup::backup(db_path, file)?;
    println!("backed up {} to {}: {}", db_path.display(), file.display(), described(&copied));
    Ok(())
}

/// `fleet admin restore`.
pub fn restore(file: &Path, db_path: &Path, replace: bool) -> Result<()> {
    let copied = db::backup::restore(file, db_path, replace)?;
    println!("restored {} to {}: {}", file.display(), db_path.display(), described(&copied));
    Ok(())
}

fn described(copied: &db::backup::Copied) -> String {
    format!(
        "schema version {}, {} tenant(s), {} revision(s), {} KiB",
        copied.schema,
        copied.tenants,
        copied.revisions,
        copied.bytes.div_ceil(1024)
    )
}

/// `fleet admin token create`: the token alone on the last line.
pub fn create_token(
    db_path: &Path,
    tenant: &str,
    principal: &str,
    grants: &[String],
    expires: Option<Duration>,
) -> Result<()> {
    let pool = db::open(db_path)?;
    let now = std::time::SystemTime::now();
    let expires_at = expires.map(|valid| humantime::format_rfc3339_seconds(now + valid).to_string());
    let token = auth::create_token(&pool.get()?, tenant, principal, grants, &db::now(), expires_at.as_deref())?;
    let until = expires_at.map(|at| format!(", valid until {at}")).unwrap_or_default();
    println!("created a token for {principal} in tenant {tenant}{until}; it is shown only once:");
    println!("{token}");
    Ok(())
}

/// `fleet admin token list`: never the secret.
pub fn list_tokens(db_path: &Path, tenant: &str, json: bool) -> Result<()> {
    let pool = db::open(db_path)?;
    let tokens = auth::list_tokens(&pool.get()?, tenant)?;
    if json {
        println!("{}", serde_json::to_string_pretty(&tokens)?);
        return Ok(());
    }
    println!("{:<21} {:<16} {:<21} {:<29} GRANTS", "ID", "PRINCIPAL", "CREATED", "EXPIRES");
    for token in tokens {
        let expires = match (&token.revoked_at, &token.expires_at) {
            (Some(revoked), _) => format!("revoked {revoked}"),
            (None, Some(expires)) => expires.clone(),
            (None, None) => "never".into(),
        };
        println!(
            "{:<21} {:<16} {:<21} {:<29} {}",
            token.id,
            token.principal,
            token.created_at,
            expires,
            token.grants.join(", ")
        );
    }
    Ok(())
}

/// `fleet admin token revoke`: at once for every server on the database.
pub fn revoke_token(db_path: &Path, id: &str) -> Result<()> {
    let pool = db::open(db_path)?;
    auth::revoke_token(&pool.get()?, id, &db::now())?;
    println!("revoked {id}; every server on this database refuses it from the next request on");
    Ok(())
}

/// `fleet plugin inspect`: the descriptor, as `serve --plugin` would load it.
pub fn inspect_plugin(file: &Path) -> Result<()> {
    let descriptor = fleet::plugins::inspect(file, default_cache_dir().as_deref())?;
    println!("{}", serde_json::to_string_pretty(&descriptor)?);
    Ok(())
}

/// `fleet component`: the planner component this binary embeds.
pub fn write_component(output: &Path) -> Result<()> {
    std::fs::write(output, fleet::planner::PLANNER).with_context(|| format!("writing {}", output.display()))?;
    eprintln!("Wrote the planner component ({} KiB) to {}.", fleet::planner::PLANNER.len() >> 10, output.display());
    Ok(())
}

/// Where compiled components are kept between runs unless `--cache-dir` says otherwise.
pub fn default_cache_dir() -> Option<PathBuf> {
    std::env::var_os("XDG_CACHE_HOME")
        .map(|dir| PathBuf::from(dir).join("fleet"))
        .or_else(|| std::env::var_os("HOME").map(|home| PathBuf::from(home).join(".cache/fleet")))
}

/// Exactly what to run to build the console's assets for this binary: into
/// `console_dir`, or into a directory to serve with `--console-dir` when this binary was
/// built without them.
fn console_build_hint(console_dir: Option<&Path>) -> String {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../console/build.sh");
    let script = script.canonicalize().unwrap_or(script);
    let binary = std::env::current_exe().map_or_else(|_| "fleet".to_owned(), |exe| exe.display().to_string());
    let (out, then) = match console_dir {
        Some(dir) => (dir.display().to_string(), String::new()),
        None => ("fleet-console".to_owned(), ", then serve with --console-dir fleet-console".to_owned()),
    };
    format!(
        "not built (this binary was built without Node.js 20+ and npm); to build it, run: \
         FLEET_BIN={binary} CONSOLE_OUT={out} bash {}{then}",
        script.display()
    )
}

/// `fleet policy test`: every `test_` rule of every file, a line each, then a count.
pub fn policy_test(files: &[PathBuf]) -> Result<()> {
    let (mut passed, mut failed) = (0, 0);
    for file in files {
        let source = std::fs::read_to_string(file).with_context(|| format!("reading {}", file.display()))?;
        let name = file.file_stem().and_then(|stem| stem.to_str()).unwrap_or("policy");
        let mut compiled = fleet_guest::policy::compile(name, &source)
            .map_err(|problem| anyhow::anyhow!("{}: {problem}", file.display()))?;
        let rules = fleet_guest::policy::test_rules(&compiled);
        if rules.is_empty() {
            println!("{}: no test_ rules", file.display());
        }
        for rule in rules {
            match compiled.holds(&rule) {
                Ok(true) => {
                    passed += 1;
                    println!("PASS {}: {rule}", file.display());
                }
                Ok(false) => {
                    failed += 1;
                    println!("FAIL {}: {rule}", file.display());
                }
                Err(error) => {
                    failed += 1;
                    println!("ERROR {}: {rule}: {error}", file.display());
                }
            }
        }
    }
    println!("{passed} passed, {failed} failed");
    if failed > 0 {
        bail!("{failed} of {} policy tests failed", passed + failed);
    }
    Ok(())
}
