//! `fleet man`: the manual page, from the same clap definitions as `--help`. The page of
//! `fleet` itself, then a section for every command and subcommand (`fleet admin token
//! create`), each with its synopsis, description and options: one page, as `git` and
//! `kubectl` users read theirs.

use std::io::Write;

use anyhow::Result;
use clap_mangen::Man;

pub fn write(fleet: clap::Command, out: &mut impl Write) -> Result<()> {
    let fleet = fleet.name("fleet");
    let page = Man::new(fleet.clone());
    // Its own sections, but not clap_mangen's list of `fleet-serve(1)` pages, which do
    // not exist: every command has its section of this page.
    page.render_title(out)?;
    page.render_name_section(out)?;
    page.render_synopsis_section(out)?;
    page.render_description_section(out)?;
    page.render_options_section(out)?;
    for command in fleet.get_subcommands() {
        section(command, "fleet", out)?;
    }
    out.write_all(ENVIRONMENT_AND_EXIT_STATUS.as_bytes())?;
    page.render_version_section(out)?;
    Ok(())
}

/// What the flags' definitions do not say: the environment a command reads, and what
/// its exit code means (docs/guide/cli-and-ci.md).
const ENVIRONMENT_AND_EXIT_STATUS: &str = r#".SH ENVIRONMENT
.TP
\fBFLEET_SERVER\fR
The server the client commands talk to (\fB\-\-server\fR); http://127.0.0.1:8080 by default.
.TP
\fBFLEET_TOKEN\fR
The bearer token of the client commands (\fB\-\-token\fR).
.TP
\fBFLEET_CA_CERT\fR
A PEM file of CA certificates the client trusts for an https:// server, instead of the system's roots.
.TP
\fBFLEET_DB\fR
The database of \fBserve\fR and \fBadmin\fR (\fB\-\-db\fR); ./fleet.db by default.
.TP
\fBFLEET_CACHE_DIR\fR
Where \fBserve\fR keeps the compiled planner and plugins (\fB\-\-cache\-dir\fR); else $XDG_CACHE_HOME/fleet or ~/.cache/fleet.
.TP
\fBFLEET_CONSOLE_DIR\fR
The console's assets \fBserve\fR serves instead of those in the binary (\fB\-\-console\-dir\fR).
.TP
\fBRUST_LOG\fR
What \fBserve\fR logs, as tracing's filter directives; fleet=info,warn by default.
.SH "EXIT STATUS"
.TP
\fB0\fR
Success: no changes (\fBplan\fR), in sync (\fBstatus\fR), the same (\fBdiff\fR), allowed (\fBpolicy eval\fR), applied (\fBapply\fR, \fBrollback\fR).
.TP
\fB1\fR
Any error, a usage error and a refused apply included; nothing was applied.
.TP
\fB2\fR
Changes to make (\fBplan\fR), drifted (\fBstatus\fR), different (\fBdiff\fR).
.TP
\fB3\fR
Blocked changes or denied by a policy (\fBplan\fR), denied (\fBpolicy eval\fR).
"#;

/// A command's section, named by its whole path, then its subcommands'.
fn section(command: &clap::Command, parent: &str, out: &mut impl Write) -> Result<()> {
    let path = format!("{parent} {}", command.get_name());
    if command.is_hide_set() {
        return Ok(());
    }
    writeln!(out, ".SH \"{}\"", path.to_uppercase())?;
    // Its synopsis, description and options as subsections of its section.
    let page = Man::new(command.clone().name(path.clone()).bin_name(path.clone()));
    let mut parts = Vec::new();
    page.render_synopsis_section(&mut parts)?;
    page.render_description_section(&mut parts)?;
    page.render_options_section(&mut parts)?;
    for line in String::from_utf8_lossy(&parts).lines() {
        match line.strip_prefix(".SH ") {
            Some(heading) => writeln!(out, ".SS {heading}")?,
            None => writeln!(out, "{line}")?,
        }
    }
    for subcommand in command.get_subcommands() {
        section(subcommand, &path, out)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory as _;

    use crate::cli::Cli;

    /// Every command's path (`admin token create`), hidden ones left out.
    fn paths(command: &clap::Command, parent: &str, into: &mut Vec<String>) {
        for subcommand in command.get_subcommands().filter(|subcommand| !subcommand.is_hide_set()) {
            let path = format!("{parent} {}", subcommand.get_name()).trim().to_owned();
            into.push(path.clone());
            paths(subcommand, &path, into);
        }
    }

    #[test]
    fn every_command_is_in_the_manual_and_in_every_shells_completion() {
        let mut commands = Vec::new();
        paths(&Cli::command(), "", &mut commands);
        assert!(commands.len() > 30 && commands.contains(&"admin token create".to_owned()), "{commands:?}");

        let mut manual = Vec::new();
        super::write(Cli::command(), &mut manual).unwrap();
        let manual = String::from_utf8(manual).unwrap();
        for path in &commands {
            assert!(manual.contains(&format!(".SH \"FLEET {}\"", path.to_uppercase())), "{path} in the manual");
        }
        for section in [".SH ENVIRONMENT", ".SH \"EXIT STATUS\"", ".SH VERSION"] {
            assert!(manual.contains(section), "{section}");
        }
        assert!(!manual.contains("(1)"), "no page it names is missing: every command is a section of this one");
        assert!(!manual.contains("SPEC §"), "the help cites nothing its readers lack");

        for shell in [
            clap_complete::Shell::Bash,
            clap_complete::Shell::Zsh,
            clap_complete::Shell::Fish,
            clap_complete::Shell::Elvish,
            clap_complete::Shell::PowerShell,
        ] {
            let mut script = Vec::new();
            clap_complete::generate(shell, &mut Cli::command(), "fleet", &mut script);
            let script = String::from_utf8(script).unwrap();
            for path in &commands {
                let name = path.rsplit(' ').next().unwrap();
                assert!(script.contains(name), "{name} ({path}) in the {shell} completion");
            }
        }
    }
}
