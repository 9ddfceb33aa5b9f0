//! The `fleet` binary: parses its command line (`cli.rs`) and runs the command it names,
//! against a server or here; everything else lives in the library.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Result, bail};
use clap::error::ErrorKind;
use clap::parser::ValueSource;
use clap::{CommandFactory, FromArgMatches};

mod audit;
mod cli;
mod client;
mod commands;
mod flags;
mod history;
mod local;
mod manual;
mod markdown;
mod proposals;
mod provenance;
mod render;
mod serve;
mod source;

use cli::{
    Admin, AdminArgs, Cli, Command, PluginCommand, PolicyCommand, SecretKeyCommand, ServerArgs, SourceCommand,
    TenantCommand, TokenCommand,
};
use client::{CliError, Client};
use commands::{ApplySource, Confirm};
use serve::LogFormat;

/// glibc's malloc grows its per-thread arenas with `mprotect`, which showed as a tenth
/// of a large apply's time in the profile; mimalloc does not.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

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
        Command::Plan { server, file, prune, out, format, output, json, as_source } => {
            client(&server).and_then(|client| {
                let format = if json { commands::PlanFormat::Json } else { format };
                let options =
                    commands::PlanOptions { prune, out: out.as_deref(), format, output: output.as_deref(), as_source };
                commands::plan(&client, &file, &options)
            })
        }
        Command::Apply { server, file, prune, plan_hash, plan, proposal, yes, overrides, heal, source, json } => {
            client(&server).and_then(|client| {
                let overrides = commands::overrides(&overrides)?;
                let mut extra = commands::Extra::new(overrides, heal);
                // An approved proposal's apply records the proposal's source.
                if proposal.is_none() {
                    // A saved plan's file is not the document's: its path is not one.
                    extra.source = provenance::source(&source, file.as_deref(), |name| std::env::var(name).ok());
                }
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
        Command::Propose { server, file, prune, title, source, json } => client(&server).and_then(|client| {
            let source = provenance::source(&source, Some(&file), |name| std::env::var(name).ok());
            proposals::propose(&client, &file, prune, title.as_deref(), source, json)
        }),
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
        Command::Source { server, command, json } => client(&server).and_then(|client| match command {
            None => source::call(&client, "get", serde_json::json!({}), json),
            Some(SourceCommand::Set {
                url,
                branch,
                path,
                mode,
                prune,
                heal,
                interval,
                token_file,
                username,
                signers,
            }) => {
                let set = source::Set {
                    url: &url,
                    branch: branch.as_deref(),
                    path: path.as_deref(),
                    mode: &mode,
                    prune,
                    heal,
                    interval: interval.as_deref(),
                    token_file: token_file.as_deref(),
                    username: username.as_deref(),
                    signers: &signers,
                };
                source::set(&client, &set, json)
            }
            Some(SourceCommand::Refresh) => source::call(&client, "refresh", serde_json::json!({}), json),
            Some(SourceCommand::Unpin) => source::call(&client, "unpin", serde_json::json!({}), json),
            Some(SourceCommand::Delete) => source::call(&client, "delete", serde_json::json!({}), json),
            Some(SourceCommand::Pin { commit }) => {
                source::call(&client, "pin", serde_json::json!({"commit": commit}), json)
            }
            Some(SourceCommand::Sync { commit, plan_hash }) => {
                let mut body = serde_json::json!({});
                if let Some(commit) = commit {
                    body["commit"] = serde_json::json!(commit);
                }
                if let Some(plan_hash) = plan_hash {
                    body["planHash"] = serde_json::json!(plan_hash);
                }
                source::call(&client, "sync", body, json)
            }
        }),
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
            Admin::SecretKey(SecretKeyCommand::Generate { output }) => local::generate_secret_key(output.as_deref()),
            Admin::SecretKey(SecretKeyCommand::Rotate { old, new }) => local::rotate_secret_key(&db_path, &old, &new),
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

fn client(args: &ServerArgs) -> Result<Client, CliError> {
    Client::new(&args.server, args.token.clone())
}
