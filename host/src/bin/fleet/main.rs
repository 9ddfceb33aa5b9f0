//! The `fleet` binary: flag parsing only; everything else lives in the library.

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use clap::error::ErrorKind;
use clap::parser::ValueSource;
use clap::{Args, CommandFactory, FromArgMatches, Parser, Subcommand};
mod audit;
mod client;
mod commands;
mod history;
mod local;
mod manual;
mod proposals;
mod render;

use client::{CliError, Client};
use commands::{ApplySource, Confirm};
use fleet::Config;
use fleet_guest::Catalog;
use std::process::ExitCode;

/// glibc's malloc grows its per-thread arenas with `mprotect`, which showed as a tenth
/// of a large apply's time in the profile; mimalloc does not.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Parser)]
#[command(name = "fleet", version, about = "A declarative control plane for compute capacity")]
struct Cli {
    /// The database of `serve` and `admin` (also given after them): a SQLite file, or
    /// `postgres://user:password@host:5432/name` for replicas on one PostgreSQL
    /// database. The client commands talk to a server instead.
    #[arg(long, env = "FLEET_DB", default_value = "./fleet.db")]
    db: PathBuf,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Runs the HTTP API and the drift reconciler.
    Serve(Box<Serve>),
    /// Creates tenants and tokens directly on the database, backs it up and restores it.
    Admin(AdminArgs),
    /// Module plugins: third parties' kinds, checked as a server would load them.
    #[command(subcommand)]
    Plugin(PluginCommand),
    /// Guardrails: Rego policies, tested and evaluated offline.
    #[command(subcommand)]
    Policy(PolicyCommand),
    /// Writes the planner component this binary embeds (for other hosts, e.g. jco).
    Component {
        /// The file to write.
        #[arg(short = 'o', long)]
        output: PathBuf,
    },
    /// Prints a shell completion script, e.g. `fleet completions bash > /etc/bash_completion.d/fleet`.
    Completions {
        /// The shell.
        shell: clap_complete::Shell,
    },
    /// Prints the manual page (roff), every command in it: `fleet man > fleet.1; man -l fleet.1`.
    Man,
    /// Prints the tenant's estate as a FleetConfig document.
    Export {
        #[command(flatten)]
        server: ServerArgs,
        /// Write the document here instead of stdout.
        #[arg(short = 'o', long)]
        output: Option<PathBuf>,
        /// The document's format [default: yaml for a .yaml/.yml --output, else json].
        #[arg(long, value_enum)]
        format: Option<commands::Format>,
    },
    /// Shows what applying a document would change. Exit code: 0 no changes, 2 changes, 3 blocked or denied, 1 error.
    Plan {
        #[command(flatten)]
        server: ServerArgs,
        /// The FleetConfig document (JSON or YAML).
        file: PathBuf,
        /// Also remove what the document no longer lists.
        #[arg(long)]
        prune: bool,
        /// Save the plan (with its document) for `fleet apply --plan`.
        #[arg(long)]
        out: Option<PathBuf>,
        /// Print the raw plan as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Applies a document, or exactly a saved plan. Shows the plan and asks first on a terminal.
    Apply {
        #[command(flatten)]
        server: ServerArgs,
        /// The FleetConfig document (JSON or YAML); not with --plan or --proposal.
        #[arg(required_unless_present_any = ["plan", "proposal"], conflicts_with_all = ["plan", "proposal"])]
        file: Option<PathBuf>,
        /// Also remove what the document no longer lists (delete, or archive pools).
        #[arg(long, conflicts_with = "plan")]
        prune: bool,
        /// Apply only if the plan still has this hash (from `fleet plan`).
        #[arg(long, conflicts_with = "plan")]
        plan_hash: Option<String>,
        /// A plan saved by `fleet plan --out`: apply exactly it, or fail saying what moved.
        #[arg(long, conflicts_with = "proposal")]
        plan: Option<PathBuf>,
        /// An approved proposal: apply exactly its plan, or fail saying why.
        #[arg(long, value_name = "N", conflicts_with_all = ["prune", "plan_hash", "heal"])]
        proposal: Option<u64>,
        /// Apply without asking. Without a terminal, apply refuses unless --yes or --plan.
        #[arg(long, short = 'y')]
        yes: bool,
        /// Override a mandatory policy's denials, saying why (audited); repeat for more.
        /// Nothing overrides an enforced policy.
        #[arg(long = "override", value_name = "POLICY=REASON")]
        overrides: Vec<String>,
        /// Heal drift: fleet.drift applies this revision again whenever a check finds
        /// drift, with this token's authority. An apply without --heal turns it off.
        #[arg(long)]
        heal: bool,
        /// Print the result (the plan and the number of calls applied) as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Proposes a document for review: prints its plan and the proposal's
    /// number. Exit code 0, or 1 on an error (a blocked or denied plan is one).
    Propose {
        #[command(flatten)]
        server: ServerArgs,
        /// The FleetConfig document (JSON or YAML).
        file: PathBuf,
        /// Also remove what the document no longer lists.
        #[arg(long)]
        prune: bool,
        /// What the change is for, in a line.
        #[arg(long)]
        title: Option<String>,
        /// Print the proposal, its plan and document as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Lists the tenant's proposals, newest first.
    Proposals {
        #[command(flatten)]
        server: ServerArgs,
        /// Only those in this state.
        #[arg(long, value_parser = ["open", "applied", "rejected", "withdrawn", "stale"])]
        state: Option<String>,
        /// How many proposals to list, at most 1000.
        #[arg(long, default_value_t = 20, value_parser = clap::value_parser!(u64).range(1..=1000))]
        limit: u64,
        /// Print the proposals as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Shows proposal N: its plan, its reviews, and whether it is approved.
    Proposal {
        #[command(flatten)]
        server: ServerArgs,
        /// The proposal.
        number: u64,
        /// Print the proposal, its plan and document as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Approves or rejects another principal's open proposal.
    Review {
        #[command(flatten)]
        server: ServerArgs,
        /// The proposal.
        number: u64,
        /// approve or reject.
        #[arg(value_parser = ["approve", "reject"])]
        verdict: String,
        /// Why, for the author and the audit trail.
        #[arg(long)]
        comment: Option<String>,
        /// Print the proposal as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Withdraws one's own open proposal.
    Withdraw {
        #[command(flatten)]
        server: ServerArgs,
        /// The proposal.
        number: u64,
        /// Print the proposal as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Lists the tenant's revisions, newest first: one per apply.
    History {
        #[command(flatten)]
        server: ServerArgs,
        /// How many revisions to list, at most 1000.
        #[arg(long, default_value_t = 20, value_parser = clap::value_parser!(u64).range(1..=1000))]
        limit: u64,
        /// Print the revisions as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Prints revision N's document, exactly as it was applied.
    Revision {
        #[command(flatten)]
        server: ServerArgs,
        /// The revision.
        number: u64,
        /// Write the document here (JSON, or YAML for .yaml/.yml) instead of stdout.
        #[arg(short = 'o', long)]
        output: Option<PathBuf>,
    },
    /// Applies revision N's document (with its prune flag) again: the plan is shown and
    /// confirmed as for apply, and the rollback is a new revision. Exit codes as for apply.
    Rollback {
        #[command(flatten)]
        server: ServerArgs,
        /// The revision to return to.
        number: u64,
        /// Also remove what the revision's document does not name (what was made since):
        /// flavors, offers and quotas deleted, pools archived. The plan shows each.
        #[arg(long)]
        prune: bool,
        /// Apply without asking. Without a terminal, rollback refuses unless --yes.
        #[arg(long, short = 'y')]
        yes: bool,
        /// Override a mandatory policy's denials, saying why (audited); repeat for more.
        #[arg(long = "override", value_name = "POLICY=REASON")]
        overrides: Vec<String>,
        /// Print the result (the plan and the number of calls applied) as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Shows what changed from revision A's document to revision B's, by kind and key.
    /// Exit code: 0 the same, 2 different, 1 error.
    Diff {
        #[command(flatten)]
        server: ServerArgs,
        /// The older revision.
        from: u64,
        /// The newer revision.
        to: u64,
        /// Print the changes as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Lists the tenant's audit records, oldest first: who changed what, how and when.
    Audit {
        #[command(flatten)]
        server: ServerArgs,
        /// Only records of this kind (e.g. `pool`).
        #[arg(long)]
        kind: Option<String>,
        /// Only records of this object id.
        #[arg(long)]
        id: Option<String>,
        /// Only records of the object with this name (as the document keys it).
        #[arg(long)]
        key: Option<String>,
        /// Only records before this sequence number (where the last page ended), newest
        /// first.
        #[arg(long, conflicts_with = "after")]
        before: Option<u64>,
        /// Only records after this sequence number, oldest first.
        #[arg(long)]
        after: Option<u64>,
        /// How many records to list, at most 1000.
        #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u64).range(1..=1000))]
        limit: u64,
        /// Print the records as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Shows the last applied document and any drift from it. Exit code: 0 in sync, 2 drifted, 1 error.
    Status {
        #[command(flatten)]
        server: ServerArgs,
        /// Check for drift now instead of reporting the last background check.
        #[arg(long)]
        refresh: bool,
        /// Print the status as JSON.
        #[arg(long)]
        json: bool,
    },
}

impl Command {
    /// The commands that talk to a server rather than open the database.
    fn is_client(&self) -> bool {
        matches!(
            self,
            Command::Export { .. }
                | Command::Plan { .. }
                | Command::Apply { .. }
                | Command::Status { .. }
                | Command::History { .. }
                | Command::Audit { .. }
                | Command::Revision { .. }
                | Command::Rollback { .. }
                | Command::Diff { .. }
                | Command::Propose { .. }
                | Command::Proposals { .. }
                | Command::Proposal { .. }
                | Command::Review { .. }
                | Command::Withdraw { .. }
        )
    }
}

#[derive(Args)]
struct ServerArgs {
    /// The fleet server.
    #[arg(long, env = "FLEET_SERVER", default_value = "http://127.0.0.1:8080")]
    server: String,
    /// A bearer token (or set FLEET_TOKEN).
    #[arg(long, env = "FLEET_TOKEN", hide_env_values = true, value_name = "TOKEN")]
    token: Option<String>,
}

#[derive(Args)]
struct Serve {
    #[command(flatten)]
    database: Database,
    /// The address to listen on.
    #[arg(long, default_value = "127.0.0.1:8080")]
    listen: String,
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
    demo: bool,
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
    log_format: LogFormat,
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

#[derive(Subcommand)]
enum PolicyCommand {
    /// Runs the `test_` rules of Rego policies, as `opa test` does, with no server;
    /// exit code 1 when one fails or a file does not compile.
    Test {
        /// The policy files (each one Rego v1 module, named by its stem).
        #[arg(required = true)]
        files: Vec<PathBuf>,
    },
    /// Prints the verdicts policy files give on a plan saved by `fleet plan --out`,
    /// planned again offline on the state saved with it (each file as a mandatory
    /// policy, instead of the server's). Exit code 3 when they deny it, 1 on an error.
    Eval {
        /// The policy files.
        #[arg(required = true)]
        files: Vec<PathBuf>,
        /// The saved plan.
        #[arg(long)]
        plan: PathBuf,
        /// Print the plan's `policy` (digest and verdicts) as JSON.
        #[arg(long)]
        json: bool,
    },
}

#[derive(Subcommand)]
enum PluginCommand {
    /// Validates a module plugin as `serve --plugin` would and prints its descriptor as
    /// JSON; exit code 1 with the reason when it is not a valid plugin.
    Inspect {
        /// The plugin component.
        file: PathBuf,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum LogFormat {
    Text,
    Json,
}

/// The database flag of the commands that work on it, after the command's name.
#[derive(Args)]
struct Database {
    /// The database: a SQLite file, or `postgres://user:password@host:5432/name`
    /// [env: FLEET_DB; default: ./fleet.db].
    #[arg(long = "db", value_name = "DB", global = true)]
    db: Option<PathBuf>,
}

#[derive(Args)]
struct AdminArgs {
    #[command(flatten)]
    database: Database,
    #[command(subcommand)]
    command: Admin,
}

#[derive(Subcommand)]
enum Admin {
    #[command(subcommand)]
    Tenant(TenantCommand),
    #[command(subcommand)]
    Token(TokenCommand),
    /// Copies the SQLite database (--db) to FILE while servers keep running on it:
    /// consistent as of one moment. For PostgreSQL, use pg_dump.
    Backup {
        /// The new file to write (never overwritten).
        file: PathBuf,
    },
    /// Puts a backup back as the database (--db): refused unless FILE is a fleet
    /// database of a schema this fleet knows. For PostgreSQL, use pg_restore.
    Restore {
        /// The backup to restore.
        file: PathBuf,
        /// Overwrite an existing database (stop every server on it first).
        #[arg(long)]
        replace: bool,
    },
}

#[derive(Subcommand)]
enum TenantCommand {
    /// Creates a tenant.
    Create {
        /// Its name (a lowercase letter, then letters, digits and dashes).
        tenant: String,
    },
}

#[derive(Subcommand)]
enum TokenCommand {
    /// Creates a token and prints it alone on the last line.
    Create {
        /// The tenant the token acts for (it must exist: `fleet admin tenant create`).
        #[arg(long)]
        tenant: String,
        /// Who the token is, as audit records and events name it (e.g. alice, ci-bot).
        #[arg(long)]
        principal: String,
        /// A grant `PERMISSION@SCOPE`, e.g. `compute:fleet:admin@compute-fleet`; repeatable.
        #[arg(long = "grant", required = true)]
        grants: Vec<String>,
        /// How long the token is valid (e.g. 12h, 30d); without it, until revoked.
        #[arg(long, value_parser = duration(LIMITS.token))]
        expires: Option<Duration>,
    },
    /// Lists a tenant's tokens: id, principal, grants, created, expires; never the secret.
    List {
        /// The tenant whose tokens to list.
        #[arg(long)]
        tenant: String,
        /// Print the list as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Revokes a token by its id, at once for every server on the database.
    Revoke {
        /// The token's id (`tok_...`, from `fleet admin token list`).
        id: String,
    },
}

fn main() -> ExitCode {
    if let Some(value) = fleet::library_backtraces(std::env::var_os("RUST_LIB_BACKTRACE").as_deref()) {
        // SAFETY: the first thing the process does, before it starts any thread, so no
        // other thread reads the environment while it changes.
        #[expect(unsafe_code, reason = "setting the environment before any thread exists")]
        unsafe {
            std::env::set_var("RUST_LIB_BACKTRACE", value);
        }
    }
    // Usage errors exit 1, like every other error (SPEC §9): 2 means "changes".
    let matches = match Cli::command().try_get_matches() {
        Ok(matches) => matches,
        Err(error) => {
            let _ = error.print();
            return match error.kind() {
                ErrorKind::DisplayHelp | ErrorKind::DisplayVersion => ExitCode::SUCCESS,
                _ => ExitCode::from(client::EXIT_ERROR),
            };
        }
    };
    let cli = match Cli::from_arg_matches(&matches) {
        Ok(cli) => cli,
        Err(error) => {
            let _ = error.print();
            return ExitCode::from(client::EXIT_ERROR);
        }
    };
    let is_client = cli.command.is_client();
    let db_given = matches.value_source("db") == Some(ValueSource::CommandLine);
    if is_client && db_given {
        eprintln!(
            "error: --db is for `serve` and `admin`; client commands talk to a server (--server or FLEET_SERVER)"
        );
        return ExitCode::from(client::EXIT_ERROR);
    }
    let file = match &cli.command {
        Command::Plan { file, .. } | Command::Propose { file, .. } => Some(file.clone()),
        Command::Apply { file, plan, .. } => file.clone().or_else(|| plan.clone()),
        _ => None,
    };
    let outcome = match cli.command {
        Command::Export { server, output, format } => {
            client(&server).and_then(|client| commands::export(&client, output.as_deref(), format))
        }
        Command::Plan { server, file, prune, out, json } => {
            client(&server).and_then(|client| commands::plan(&client, &file, prune, out.as_deref(), json))
        }
        Command::Apply { server, file, prune, plan_hash, plan, proposal, yes, overrides, heal, json } => {
            client(&server).and_then(|client| {
                let overrides = commands::overrides(&overrides)?;
                let extra = commands::Extra::new(overrides, heal);
                let source = match (plan, proposal, file) {
                    (Some(saved), _, _) => ApplySource::SavedPlan(saved),
                    (None, Some(number), _) => ApplySource::Proposal(number),
                    (None, None, Some(file)) => ApplySource::Document { file, prune, plan_hash },
                    (None, None, None) => {
                        return Err(CliError::Input("give a document file, --plan or --proposal".into()));
                    }
                };
                let confirm = if yes { Confirm::Given } else { Confirm::Ask };
                commands::apply(&client, &source, &extra, json, confirm)
            })
        }
        Command::Propose { server, file, prune, title, json } => {
            client(&server).and_then(|client| proposals::propose(&client, &file, prune, title.as_deref(), json))
        }
        Command::Proposals { server, state, limit, json } => {
            client(&server).and_then(|client| proposals::list(&client, state.as_deref(), limit, json))
        }
        Command::Proposal { server, number, json } => {
            client(&server).and_then(|client| proposals::show(&client, number, json))
        }
        Command::Review { server, number, verdict, comment, json } => {
            client(&server).and_then(|client| proposals::review(&client, number, &verdict, comment.as_deref(), json))
        }
        Command::Withdraw { server, number, json } => {
            client(&server).and_then(|client| proposals::withdraw(&client, number, json))
        }
        Command::History { server, limit, json } => {
            client(&server).and_then(|client| history::history(&client, limit, json))
        }
        Command::Revision { server, number, output } => {
            client(&server).and_then(|client| history::revision(&client, number, output.as_deref()))
        }
        Command::Rollback { server, number, prune, yes, overrides, json } => client(&server).and_then(|client| {
            let extra = commands::Extra::new(commands::overrides(&overrides)?, false);
            let confirm = if yes { Confirm::Given } else { Confirm::Ask };
            commands::apply(&client, &ApplySource::Revision { number, prune }, &extra, json, confirm)
        }),
        Command::Diff { server, from, to, json } => {
            client(&server).and_then(|client| history::diff(&client, from, to, json))
        }
        Command::Audit { server, kind, id, key, before, after, limit, json } => client(&server)
            .and_then(|client| audit::audit(&client, &audit::Filter { kind, id, key, before, after, limit }, json)),
        Command::Status { server, refresh, json } => {
            client(&server).and_then(|client| commands::status(&client, json, refresh))
        }
        Command::Policy(PolicyCommand::Eval { files, plan, json }) => commands::policy_eval(&files, &plan, json),
        command => {
            return match run_local(cli.db, command) {
                Ok(()) => ExitCode::SUCCESS,
                Err(error) => {
                    eprintln!("error: {error:#}");
                    ExitCode::from(client::EXIT_ERROR)
                }
            };
        }
    };
    match outcome {
        Ok(code) => ExitCode::from(code),
        Err(error) => {
            render::report(&error, file.as_deref());
            ExitCode::from(client::EXIT_ERROR)
        }
    }
}

/// The commands that run here rather than against a server, with the log they write.
fn run_local(db_path: PathBuf, command: Command) -> Result<()> {
    local::logs(matches!(&command, Command::Serve(serve) if serve.log_format == LogFormat::Json));
    // `fleet serve --db X` as well as `fleet --db X serve`.
    let (db_path, command) = match command {
        Command::Serve(serve) => (serve.database.db.clone().unwrap_or(db_path), Command::Serve(serve)),
        Command::Admin(admin) => (admin.database.db.clone().unwrap_or(db_path), Command::Admin(admin)),
        command => (db_path, command),
    };
    match command {
        Command::Serve(serve) => {
            let serve = *serve;
            let (listen, demo) = (serve.listen.clone(), serve.demo);
            local::serve(serve.config(db_path)?, listen, demo)
        }
        Command::Admin(AdminArgs { command, .. }) => match command {
            Admin::Tenant(TenantCommand::Create { tenant }) => local::create_tenant(&db_path, &tenant),
            Admin::Token(TokenCommand::Create { tenant, principal, grants, expires }) => {
                local::create_token(&db_path, &tenant, &principal, &grants, expires)
            }
            Admin::Token(TokenCommand::List { tenant, json }) => local::list_tokens(&db_path, &tenant, json),
            Admin::Token(TokenCommand::Revoke { id }) => local::revoke_token(&db_path, &id),
            Admin::Backup { file } => local::backup(&db_path, &file),
            Admin::Restore { file, replace } => local::restore(&file, &db_path, replace),
        },
        Command::Plugin(PluginCommand::Inspect { file }) => local::inspect_plugin(&file),
        Command::Policy(PolicyCommand::Test { files }) => local::policy_test(&files),
        Command::Component { output } => local::write_component(&output),
        // Made whole, then written: a reader that stops early (`| head`) ends it quietly.
        Command::Completions { shell } => {
            let mut script = Vec::new();
            clap_complete::generate(shell, &mut Cli::command(), "fleet", &mut script);
            Ok(client::write_stdout(&script)?)
        }
        Command::Man => {
            let mut page = Vec::new();
            manual::write(Cli::command(), &mut page)?;
            Ok(client::write_stdout(&page)?)
        }
        // The rest are the client commands (`Command::is_client`), which `main` runs.
        _ => bail!("client commands do not use the database"),
    }
}

impl Serve {
    /// The server's configuration from its flags.
    fn config(self, db_path: PathBuf) -> Result<Config> {
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

fn client(args: &ServerArgs) -> Result<Client, CliError> {
    Client::new(&args.server, args.token.clone())
}

/// The longest value each kind of duration flag takes: every one must be longer than
/// zero and no longer than its bound, so that no value reaches a clock, a timer or a
/// date it cannot be represented in (issue 30: `--expires 1000000000d` once panicked
/// formatting a date past the year 9999). clap names the flag in the message.
struct DurationLimits {
    /// How often the reconciler checks.
    drift_interval: Duration,
    /// Connection and lock timeouts.
    timeout: Duration,
    /// A sandbox's CPU budget.
    cpu: Duration,
    /// How long a token lives.
    token: Duration,
    /// How long revisions are kept.
    retention: Duration,
}

const DAY: Duration = Duration::from_secs(24 * 3600);

const LIMITS: DurationLimits = DurationLimits {
    drift_interval: Duration::from_secs(30 * 24 * 3600),
    timeout: DAY,
    cpu: Duration::from_secs(3600),
    token: Duration::from_secs(100 * 365 * 24 * 3600),
    retention: Duration::from_secs(100 * 365 * 24 * 3600),
};

/// The largest request body a server may be told to accept: 4 GiB.
const MAX_BODY_LIMIT: u64 = 4 << 30;
/// A sandbox's memory is a 32-bit WebAssembly memory: at most 4 GiB.
const MAX_MEMORY_MIB: i64 = 4096;
/// All calls' memory together: at most 1 TiB.
const MAX_MEMORY_TOTAL_MIB: i64 = 1 << 20;

/// A duration for a sentence: `30 days`, `1 h`, where humantime writes `30days`.
fn spaced(duration: Duration) -> String {
    let written = humantime::format_duration(duration).to_string();
    let mut spaced = String::with_capacity(written.len() + 4);
    let mut previous = ' ';
    for character in written.chars() {
        if previous.is_ascii_digit() && character.is_alphabetic() {
            spaced.push(' ');
        }
        spaced.push(character);
        previous = character;
    }
    spaced
}

/// A parser of durations such as `10s` or `15m`, longer than zero and at most `max`.
fn duration(max: Duration) -> impl Fn(&str) -> Result<Duration, String> + Clone + Send + Sync + 'static {
    move |text: &str| match humantime::parse_duration(text) {
        Ok(duration) if duration.is_zero() => Err("must be longer than zero".into()),
        Ok(duration) if duration > max => Err(format!("must be at most {}", spaced(max))),
        Ok(duration) => Ok(duration),
        Err(error) => Err(format!("{error} (a duration such as 30s, 15m or 12h)")),
    }
}
