//! `fleet serve`'s flags, and the server's [`Config`] they make: every bound a flag
//! keeps to, and the checks of flags against each other that clap cannot make.

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use clap::Args;
use fleet::Config;
use fleet_guest::Catalog;

use crate::flags::{Database, LIMITS, duration};
use crate::local;

#[derive(Args)]
pub(crate) struct Serve {
    #[command(flatten)]
    pub(crate) database: Database,
    /// The address to listen on.
    #[arg(long, default_value = "127.0.0.1:8080")]
    pub(crate) listen: String,
    /// The modules to run (comma-separated groups): sites, accounts, pools, quotas, offers, flavors.
    #[arg(long, value_delimiter = ',', default_value = "sites,accounts,pools,quotas,offers,flavors")]
    modules: Vec<String>,
    /// How often fleet.drift re-plans applied documents (e.g. 15m, 30s).
    #[arg(long, default_value = "15m", value_parser = duration(LIMITS.drift_interval))]
    drift_interval: Duration,
    /// Serve reads only: apply and every other mutation answer UNSUPPORTED, no drift
    /// checks run, and nothing is written to the database.
    #[arg(long, conflicts_with = "demo")]
    read_only: bool,
    /// Create tenant `demo` with sample objects and print a token with all permissions.
    #[arg(long)]
    pub(crate) demo: bool,
    /// The largest request body accepted, in bytes.
    #[arg(long, default_value_t = 16 << 20, value_parser = clap::value_parser!(u64).range(1..=MAX_BODY_LIMIT))]
    body_limit: u64,
    /// The memory the requests being served may hold at once, in MiB: their bodies and
    /// reading them (a request past it is refused with Retry-After).
    #[arg(long, value_name = "MIB", default_value_t = (fleet::http::DEFAULT_REQUEST_MEMORY >> 20) as u32,
          value_parser = clap::value_parser!(u32).range(1..=MAX_MEMORY_TOTAL_MIB))]
    request_memory_total_mib: u32,
    /// How long a request head may take to arrive.
    #[arg(long, default_value = "10s", value_parser = duration(LIMITS.timeout))]
    head_timeout: Duration,
    /// How long an idle keep-alive connection stays open.
    #[arg(long, default_value = "60s", value_parser = duration(LIMITS.timeout))]
    idle_timeout: Duration,
    /// How long a request body may pause before the request ends.
    #[arg(long, default_value = "30s", value_parser = duration(LIMITS.timeout))]
    body_timeout: Duration,
    /// Connections open at once; more wait until one closes.
    #[arg(long, default_value_t = 4096, value_parser = clap::value_parser!(u32).range(1..))]
    max_connections: u32,
    /// The server log's format on stderr: one event per request, and the rest.
    #[arg(long, value_enum, default_value = "text")]
    pub(crate) log_format: LogFormat,
    /// How long a request waits for another process's lock on the database before it
    /// answers UNAVAILABLE.
    #[arg(long, default_value = "10s", value_parser = duration(LIMITS.timeout))]
    busy_timeout: Duration,
    /// The planner's CPU budget per request.
    #[arg(long, default_value = "5s", value_parser = duration(LIMITS.cpu))]
    sandbox_cpu: Duration,
    /// How long a fleet request may take in all: the planner's work, and the database's
    /// and plugins' work on its behalf, which its CPU budget does not count.
    #[arg(long, default_value = "5m", value_parser = duration(LIMITS.timeout))]
    request_timeout: Duration,
    /// The planner's memory cap per request, in MiB (at most 4096, a 32-bit memory).
    #[arg(long, default_value_t = 256, value_parser = clap::value_parser!(u32).range(1..=MAX_MEMORY_MIB))]
    sandbox_memory_mib: u32,
    /// The memory all planner calls may hold at once, in MiB, each counted at its cap:
    /// a call waits until its cap fits (default: a quarter of the machine's memory, at
    /// most 4096).
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=MAX_MEMORY_TOTAL_MIB))]
    sandbox_memory_total_mib: Option<u32>,
    /// Where the compiled planner is cached between runs (default: ~/.cache/fleet).
    #[arg(long, env = "FLEET_CACHE_DIR")]
    cache_dir: Option<PathBuf>,
    /// Serve the console's assets from this directory, built by console/build.sh (default: those embedded in the binary, which the build makes when Node.js is installed).
    #[arg(long, env = "FLEET_CONSOLE_DIR", alias = "preview-dir")]
    console_dir: Option<PathBuf>,
    /// Serve HTTPS with this certificate chain (PEM), with --tls-key.
    #[arg(long, value_name = "FILE.pem", requires = "tls_key")]
    tls_cert: Option<PathBuf>,
    /// The private key (PEM) of --tls-cert.
    #[arg(long, value_name = "FILE.pem", requires = "tls_cert")]
    tls_key: Option<PathBuf>,
    /// A module plugin to load (a component of wit/module); repeat for more.
    #[arg(long = "plugin", value_name = "FILE.wasm")]
    plugins: Vec<PathBuf>,
    /// A deployment policy: a Rego module judging every tenant's plans, at
    /// a level (advisory, mandatory or enforced), named by the file's stem; repeat for
    /// more.
    #[arg(long = "policy", value_name = "LEVEL:FILE.rego")]
    policies: Vec<String>,
    /// Apply every plan with calls only through an approved proposal, not
    /// only those that policies' require_approval rules name.
    #[arg(long)]
    require_approval: bool,
    /// Keep only the newest N revisions of each tenant (default: all); an apply removes
    /// older ones. The applied revision is always kept.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    keep_revisions: Option<u64>,
    /// Keep only revisions applied within this long (e.g. 90d; default: all); an apply
    /// removes older ones. The applied revision is always kept.
    #[arg(long, value_name = "DURATION", value_parser = duration(LIMITS.retention))]
    revisions_max_age: Option<Duration>,
    /// Webhooks may use http:// URLs, not only https://.
    #[arg(long)]
    webhook_allow_http: bool,
    /// A network webhooks may reach although it is not public (loopback, private,
    /// link-local, unique-local, metadata); repeatable.
    #[arg(long = "webhook-allow", value_name = "CIDR", value_parser = parse_network)]
    webhook_allow: Vec<ipnet::IpNet>,
    /// A CA certificate (PEM) webhooks' TLS trusts besides the system's roots.
    #[arg(long, value_name = "FILE.pem")]
    webhook_ca: Option<PathBuf>,
    /// The most webhooks one tenant may have.
    #[arg(long, value_name = "N", default_value_t = fleet::webhooks::PER_TENANT as u16,
          value_parser = clap::value_parser!(u16).range(1..))]
    webhooks_per_tenant: u16,
    /// The key that encrypts secrets at rest (webhook signing secrets): a file of exactly
    /// 32 random bytes, as `fleet admin secret-key generate` writes. Without it, secrets
    /// are stored unencrypted; a database holding encrypted ones refuses to serve.
    #[arg(long, value_name = "FILE", env = "FLEET_SECRET_KEY_FILE")]
    secret_key_file: Option<PathBuf>,
    /// Git sources may use http://, git:// and file:// URLs, not only https:// (tests and
    /// in-house mirrors).
    #[arg(long)]
    git_allow_insecure: bool,
    /// A network git sources may reach although it is not public; repeatable.
    #[arg(long = "git-allow", value_name = "CIDR", value_parser = parse_network)]
    git_allow: Vec<ipnet::IpNet>,
    /// How long one fetch of a git source may take.
    #[arg(long, default_value = "60s", value_parser = duration(LIMITS.timeout))]
    git_timeout: Duration,
    /// The most bytes one fetch of a git source may bring.
    #[arg(long, value_name = "BYTES", default_value_t = 256 << 20, value_parser = clap::value_parser!(u64).range(1..))]
    git_max_bytes: u64,
    /// Where this replica keeps the git sources' fetched objects (default: a directory
    /// beside the cache).
    #[arg(long, value_name = "DIR")]
    git_cache: Option<PathBuf>,
    /// Scales the webhooks' retry schedule and its 24-hour window (tests shorten them).
    #[arg(long, hide = true, default_value_t = 1.0)]
    webhook_time_scale: f64,
    /// A plugin check's CPU budget per call.
    #[arg(long, default_value = "1s", value_parser = duration(LIMITS.cpu))]
    plugin_cpu: Duration,
    /// A plugin check's memory cap per call, in MiB (at most 4096).
    #[arg(long, default_value_t = 128, value_parser = clap::value_parser!(u32).range(1..=MAX_MEMORY_MIB))]
    plugin_memory_mib: u32,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum LogFormat {
    Text,
    Json,
}

/// The largest request body a server may be told to accept: 4 GiB.
const MAX_BODY_LIMIT: u64 = 4 << 30;
/// A sandbox's memory is a 32-bit WebAssembly memory: at most 4 GiB.
const MAX_MEMORY_MIB: i64 = 4096;
/// All calls' memory together: at most 1 TiB.
const MAX_MEMORY_TOTAL_MIB: i64 = 1 << 20;

impl Serve {
    /// The server's configuration from its flags.
    pub(crate) fn config(self, db_path: PathBuf) -> Result<Config> {
        let mut config = Config::new(db_path);
        config.modules = parse_modules(&self.modules)?;
        config.drift_interval = self.drift_interval;
        config.read_only = self.read_only;
        config.body_limit = usize::try_from(self.body_limit).context("--body-limit does not fit this machine")?;
        config.request_memory_total = (self.request_memory_total_mib as usize) << 20;
        let largest = fleet::calls::memory::held_for(config.body_limit);
        if largest > config.request_memory_total {
            bail!(
                "--request-memory-total-mib {} cannot hold one request of --body-limit {} bytes, which may take {} MiB \
                 with its reading",
                self.request_memory_total_mib,
                self.body_limit,
                largest.div_ceil(1 << 20)
            );
        }
        config.limits.head_timeout = self.head_timeout;
        config.limits.idle_timeout = self.idle_timeout;
        config.limits.body_timeout = self.body_timeout;
        config.limits.max_connections = self.max_connections as usize;
        config.busy_timeout = self.busy_timeout;
        config.budget.cpu = self.sandbox_cpu;
        config.request_timeout = self.request_timeout;
        config.budget.memory_bytes = (self.sandbox_memory_mib as usize) << 20;
        if let Some(total) = self.sandbox_memory_total_mib {
            anyhow::ensure!(
                total >= self.sandbox_memory_mib,
                "--sandbox-memory-total-mib ({total}) must hold at least one call's --sandbox-memory-mib ({})",
                self.sandbox_memory_mib
            );
            config.sandbox_memory_total = (total as usize) << 20;
        }
        config.cache_dir = self.cache_dir.or_else(local::default_cache_dir);
        if let Some(console_dir) = self.console_dir {
            config.console_dir = Some(console_dir);
        }
        config.plugins = self.plugins;
        config.policies = self.policies;
        config.require_approval = self.require_approval;
        config.retention =
            fleet::fleet::history::Retention { count: self.keep_revisions, max_age: self.revisions_max_age };
        config.webhook_reach = fleet::reach::Reach { allow_http: self.webhook_allow_http, allow: self.webhook_allow };
        config.webhook_ca = self.webhook_ca;
        config.webhooks_per_tenant = usize::from(self.webhooks_per_tenant);
        if !(self.webhook_time_scale > 0.0 && self.webhook_time_scale <= 1.0) {
            bail!("--webhook-time-scale must be more than 0 and at most 1");
        }
        config.webhook_schedule = fleet::webhooks::Schedule { scale: self.webhook_time_scale };
        config.secret_key = self.secret_key_file.as_deref().map(fleet::secrets::Key::read).transpose()?;
        config.git.allow_insecure = self.git_allow_insecure;
        config.git.allow = self.git_allow;
        config.git.timeout = self.git_timeout;
        config.git.max_bytes = self.git_max_bytes;
        if let Some(cache) = self.git_cache.or_else(|| config.cache_dir.as_ref().map(|dir| dir.join("git"))) {
            config.git.cache = cache;
        }
        config.tls = self.tls_cert.zip(self.tls_key);
        config.plugin_budget.cpu = self.plugin_cpu;
        config.plugin_budget.memory_bytes = (self.plugin_memory_mib as usize) << 20;
        Ok(config)
    }
}

/// A network in CIDR notation, `127.0.0.0/8` or `fd00::/8`.
fn parse_network(text: &str) -> Result<ipnet::IpNet, String> {
    text.parse().map_err(|_| format!("{text:?} is not a network in CIDR notation, such as 10.0.0.0/8"))
}

/// The kinds of the modules named by their groups.
fn parse_modules(groups: &[String]) -> Result<BTreeSet<String>> {
    let catalog = Catalog::built_in();
    groups
        .iter()
        .map(|group| {
            let kind = catalog.by_group(group.trim()).map(|position| catalog.get(position).kind.to_owned());
            kind.with_context(|| {
                let groups: Vec<&str> = catalog.iter().map(|(_, kind)| kind.group).collect();
                format!("unknown module {group:?}; the modules are {}", groups.join(", "))
            })
        })
        .collect()
}
