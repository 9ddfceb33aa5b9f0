//! The `fleet` binary: flag parsing only; everything else lives in the library.

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use clap::{Args, Parser, Subcommand};
use fleet::{App, Config, auth, db, demo};
use fleet_guest::Kind;

#[derive(Parser)]
#[command(name = "fleet", version, about = "A declarative control plane for compute capacity")]
struct Cli {
    /// The SQLite database file.
    #[arg(long, global = true, env = "FLEET_DB", default_value = "./fleet.db")]
    db: PathBuf,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Runs the HTTP API and the drift reconciler.
    Serve(Serve),
    /// Creates tenants and tokens directly on the database.
    #[command(subcommand)]
    Admin(Admin),
}

#[derive(Args)]
struct Serve {
    /// The address to listen on.
    #[arg(long, default_value = "127.0.0.1:8080")]
    listen: String,
    /// The modules to run (comma-separated groups): sites, accounts, pools, quotas, offers, flavors.
    #[arg(long, value_delimiter = ',', default_value = "sites,accounts,pools,quotas,offers,flavors")]
    modules: Vec<String>,
    /// How often fleet.drift re-plans applied documents (e.g. 15m, 30s).
    #[arg(long, default_value = "15m", value_parser = humantime::parse_duration)]
    drift_interval: Duration,
    /// Serve reads only: apply and every other mutation answer UNSUPPORTED.
    #[arg(long)]
    read_only: bool,
    /// Create tenant `demo` with sample objects and print a token with all permissions.
    #[arg(long)]
    demo: bool,
    /// The largest request body accepted, in bytes.
    #[arg(long, default_value_t = 16 << 20)]
    body_limit: usize,
    /// The planner's CPU budget per request.
    #[arg(long, default_value = "5s", value_parser = humantime::parse_duration)]
    sandbox_cpu: Duration,
    /// The planner's memory cap per request, in MiB.
    #[arg(long, default_value_t = 256)]
    sandbox_memory_mib: usize,
    /// Where the compiled planner is cached between runs (default: ~/.cache/fleet).
    #[arg(long, env = "FLEET_CACHE_DIR")]
    cache_dir: Option<PathBuf>,
}

#[derive(Subcommand)]
enum Admin {
    #[command(subcommand)]
    Tenant(TenantCommand),
    #[command(subcommand)]
    Token(TokenCommand),
}

#[derive(Subcommand)]
enum TenantCommand {
    /// Creates a tenant.
    Create { tenant: String },
}

#[derive(Subcommand)]
enum TokenCommand {
    /// Creates a token and prints it alone on the last line.
    Create {
        #[arg(long)]
        tenant: String,
        #[arg(long)]
        principal: String,
        /// A grant `PERMISSION@SCOPE`, e.g. `compute:fleet:admin@compute-fleet`; repeatable.
        #[arg(long = "grant", required = true)]
        grants: Vec<String>,
    },
}

fn main() -> Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "fleet=info,warn".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    let cli = Cli::parse();
    match cli.command {
        Command::Serve(serve) => run_server(cli.db, serve),
        Command::Admin(Admin::Tenant(TenantCommand::Create { tenant })) => {
            let pool = db::open(&cli.db)?;
            auth::create_tenant(&*pool.get()?, &tenant, &db::now())?;
            println!("created tenant {tenant}");
            Ok(())
        }
        Command::Admin(Admin::Token(TokenCommand::Create { tenant, principal, grants })) => {
            let pool = db::open(&cli.db)?;
            let token = auth::create_token(&*pool.get()?, &tenant, &principal, &grants, &db::now())?;
            println!("created a token for {principal} in tenant {tenant}; it is shown only once:");
            println!("{token}");
            Ok(())
        }
    }
}

fn parse_modules(groups: &[String]) -> Result<BTreeSet<Kind>> {
    groups
        .iter()
        .map(|group| {
            Kind::ALL.into_iter().find(|kind| kind.group() == group.trim()).with_context(|| {
                format!("unknown module {group:?}; the modules are sites, accounts, pools, quotas, offers, flavors")
            })
        })
        .collect()
}

fn run_server(db_path: PathBuf, serve: Serve) -> Result<()> {
    let mut config = Config::new(db_path);
    config.modules = parse_modules(&serve.modules)?;
    config.drift_interval = serve.drift_interval;
    if config.drift_interval.is_zero() {
        bail!("--drift-interval must be longer than zero");
    }
    config.read_only = serve.read_only;
    config.body_limit = serve.body_limit;
    config.budget.cpu = serve.sandbox_cpu;
    config.budget.memory_bytes = serve.sandbox_memory_mib << 20;
    config.cache_dir = serve
        .cache_dir
        .or_else(|| std::env::var_os("XDG_CACHE_HOME").map(|dir| PathBuf::from(dir).join("fleet")))
        .or_else(|| std::env::var_os("HOME").map(|home| PathBuf::from(home).join(".cache/fleet")));
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    runtime.block_on(async {
        let listener = tokio::net::TcpListener::bind(&serve.listen)
            .await
            .with_context(|| format!("cannot listen on {}", serve.listen))?;
        let app = App::new(config)?;
        let address = listener.local_addr()?;
        if serve.demo {
            let app = app.clone();
            let token = tokio::task::spawn_blocking(move || demo::seed(&app)).await??;
            println!("demo tenant {:?}, principal {:?}; token with every permission:", demo::TENANT, demo::PRINCIPAL);
            println!("  export FLEET_TOKEN={token}");
            println!(
                "  curl -s -X POST http://{address}/api/compute/fleet/export -H \"Authorization: Bearer $FLEET_TOKEN\""
            );
        }
        println!("fleet listening on http://{address}");
        fleet::serve(app, listener, fleet::shutdown_signal()).await
    })
}
