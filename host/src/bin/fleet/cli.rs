//! The command line as clap reads it: every command and its flags, whose doc comments
//! are the help `fleet --help` prints and the page `fleet man` writes. `serve`'s flags
//! are `serve.rs`'s; `--db` and the durations, which several commands take, `flags.rs`'s.

use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};

use crate::commands;
use crate::flags::{Database, LIMITS, duration};
use crate::serve::Serve;

#[derive(Parser)]
#[command(name = "fleet", version, about = "A declarative control plane for compute capacity")]
pub(crate) struct Cli {
    /// The database of `serve` and `admin` (also given after them): a SQLite file, or
    /// `postgres://user:password@host:5432/name` for replicas on one PostgreSQL
    /// database. The client commands talk to a server instead.
    #[arg(long, env = "FLEET_DB", default_value = "./fleet.db")]
    pub(crate) db: PathBuf,
    #[command(subcommand)]
    pub(crate) command: Command,
}

#[derive(Subcommand)]
pub(crate) enum Command {
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
        /// The FleetConfig document: a JSON or YAML file, or a directory whose
        /// *.yaml, *.yml and *.json files are merged.
        file: PathBuf,
        /// Also remove what the document no longer lists.
        #[arg(long)]
        prune: bool,
        /// Save the plan (with its document) for `fleet apply --plan`.
        #[arg(long)]
        out: Option<PathBuf>,
        /// How to show the plan: text for a terminal, the raw plan as JSON, or a
        /// pull-request comment in GitHub-flavoured Markdown.
        #[arg(long, value_enum, default_value_t = commands::PlanFormat::Text)]
        format: commands::PlanFormat,
        /// Write the plan as --format says to this file (e.g. "$GITHUB_STEP_SUMMARY")
        /// and print only its summary line.
        #[arg(long, value_name = "FILE")]
        output: Option<PathBuf>,
        /// Print the raw plan as JSON: --format json.
        #[arg(long, conflicts_with = "format")]
        json: bool,
        /// Plan as the tenant's git source would apply it: as the token that put the
        /// source, with the source's prune. Needs only compute:sources:plan (a pull
        /// request's CI job), not the grants to apply.
        #[arg(long, conflicts_with_all = ["prune", "out"])]
        as_source: bool,
    },
    /// Applies a document, or exactly a saved plan. Shows the plan and asks first on a terminal.
    Apply {
        #[command(flatten)]
        server: ServerArgs,
        /// The FleetConfig document: a JSON or YAML file, or a directory whose *.yaml,
        /// *.yml and *.json files are merged; not with --plan or --proposal.
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
        #[arg(long, value_name = "N", conflicts_with_all = ["prune", "plan_hash", "heal", "source_repo"])]
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
        #[command(flatten)]
        source: SourceArgs,
        /// Print the result (the plan and the number of calls applied) as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Proposes a document for review: prints its plan and the proposal's
    /// number. Exit code 0, or 1 on an error (a blocked or denied plan is one).
    Propose {
        #[command(flatten)]
        server: ServerArgs,
        /// The FleetConfig document: a JSON or YAML file, or a directory whose *.yaml,
        /// *.yml and *.json files are merged.
        file: PathBuf,
        #[command(flatten)]
        source: SourceArgs,
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
    /// The tenant's git source: the repository fleet pulls its document from, and its
    /// state. Without a subcommand, shows the source and its status.
    Source {
        #[command(flatten)]
        server: ServerArgs,
        #[command(subcommand)]
        command: Option<SourceCommand>,
        /// Print the answer as JSON.
        #[arg(long, global = true)]
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
    pub(crate) fn is_client(&self) -> bool {
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

/// Where the document came from, recorded on the revision or proposal (SPEC §20.2).
/// Not given, in GitHub Actions or GitLab CI they are the job's repository and commit.
#[derive(Args)]
pub(crate) struct SourceArgs {
    /// The repository the document came from: an https or ssh URL, without credentials.
    #[arg(long, value_name = "URL", requires = "source_commit")]
    pub(crate) source_repo: Option<String>,
    /// The commit the document came from (7 to 64 hex digits).
    #[arg(long, value_name = "SHA", requires = "source_repo")]
    pub(crate) source_commit: Option<String>,
    /// The branch or tag the commit was on.
    #[arg(long, value_name = "REF", requires = "source_repo")]
    pub(crate) source_ref: Option<String>,
    /// The document's path in the repository [default: FILE's, in CI].
    #[arg(long, value_name = "PATH", requires = "source_repo")]
    pub(crate) source_path: Option<String>,
}

#[derive(Args)]
pub(crate) struct ServerArgs {
    /// The fleet server.
    #[arg(long, env = "FLEET_SERVER", default_value = "http://127.0.0.1:8080")]
    pub(crate) server: String,
    /// A bearer token (or set FLEET_TOKEN).
    #[arg(long, env = "FLEET_TOKEN", hide_env_values = true, value_name = "TOKEN")]
    pub(crate) token: Option<String>,
}

#[derive(Subcommand)]
pub(crate) enum SourceCommand {
    /// Creates or replaces the source: the repository, branch and path of the
    /// document, and what a new commit does (observe, propose, auto). Prints the
    /// inbound hook's URL and secret, once.
    Set {
        /// The repository's https URL.
        url: String,
        #[arg(long, value_name = "BRANCH")]
        branch: Option<String>,
        /// The document's file or directory in the repository [default: the whole tree].
        #[arg(long, value_name = "PATH")]
        path: Option<String>,
        /// observe: say when git is ahead; propose: open a proposal per commit; auto: apply.
        #[arg(long, value_parser = ["observe", "propose", "auto"])]
        mode: String,
        /// Also remove what the document no longer lists.
        #[arg(long)]
        prune: bool,
        /// Heal drift back to the applied commit.
        #[arg(long)]
        heal: bool,
        /// How often to ask for the branch's head (at least 1m) [default: 3m].
        #[arg(long, value_name = "DURATION")]
        interval: Option<String>,
        /// A file holding the token that reads the repository (a deploy token).
        #[arg(long, value_name = "FILE")]
        token_file: Option<PathBuf>,
        /// The user name sent with the token [default: x-access-token].
        #[arg(long, requires = "token_file")]
        username: Option<String>,
        /// An OpenSSH public key file whose signatures are accepted; repeat for more.
        /// With any, only commits signed by one of them are applied.
        #[arg(long = "signer", value_name = "KEYFILE")]
        signers: Vec<PathBuf>,
    },
    /// Asks for the branch's head and acts on it now.
    Refresh,
    /// Applies the document at COMMIT (default: the head), in any mode.
    Sync {
        commit: Option<String>,
        /// Apply only if the plan still has this hash.
        #[arg(long)]
        plan_hash: Option<String>,
    },
    /// Holds the estate at COMMIT: applied and healed to it, new heads ignored until unpinned.
    Pin { commit: String },
    /// Follows the branch's head again.
    Unpin,
    /// Deletes the source; the estate is left as it is.
    Delete,
}

#[derive(Subcommand)]
pub(crate) enum PolicyCommand {
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
pub(crate) enum PluginCommand {
    /// Validates a module plugin as `serve --plugin` would and prints its descriptor as
    /// JSON; exit code 1 with the reason when it is not a valid plugin.
    Inspect {
        /// The plugin component.
        file: PathBuf,
    },
}

#[derive(Args)]
pub(crate) struct AdminArgs {
    #[command(flatten)]
    pub(crate) database: Database,
    #[command(subcommand)]
    pub(crate) command: Admin,
}

#[derive(Subcommand)]
pub(crate) enum Admin {
    #[command(subcommand)]
    Tenant(TenantCommand),
    #[command(subcommand)]
    Token(TokenCommand),
    /// The key that encrypts secrets at rest (`serve --secret-key-file`): make one, or
    /// move every secret to a new one.
    #[command(subcommand)]
    SecretKey(SecretKeyCommand),
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
pub(crate) enum SecretKeyCommand {
    /// Writes a new key, 32 random bytes, to FILE (mode 0600, never over a file that
    /// exists), or to stdout when it is not a terminal.
    Generate {
        /// The new file to write.
        #[arg(short = 'o', long, value_name = "FILE")]
        output: Option<PathBuf>,
    },
    /// Encrypts every secret in the database (--db) again with the new key, in one
    /// transaction: those the old key decrypts and those stored unencrypted. Then serve
    /// with --secret-key-file NEW; run it again to catch any a server still on the old
    /// key wrote meanwhile.
    Rotate {
        /// The key the secrets are encrypted with now.
        #[arg(long, value_name = "FILE")]
        old: PathBuf,
        /// The key to encrypt them with.
        #[arg(long, value_name = "FILE")]
        new: PathBuf,
    },
}

#[derive(Subcommand)]
pub(crate) enum TenantCommand {
    /// Creates a tenant.
    Create {
        /// Its name (a lowercase letter, then letters, digits and dashes).
        tenant: String,
    },
}

#[derive(Subcommand)]
pub(crate) enum TokenCommand {
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
