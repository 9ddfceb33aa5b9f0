//! `fleet man`: the manual page, from the same clap definitions as `--help`. The page of
//! `fleet` itself, then a section for every command and subcommand (`fleet admin token
//! create`), each with its synopsis, description and options: one page, as `git` and
//! `kubectl` users read theirs.

use std::io::Write;

use anyhow::Result;
use clap_mangen::Man;

pub fn write(fleet: clap::Command, out: &mut impl Write) -> Result<()> {
    let fleet = fleet.name("fleet");
    Man::new(fleet.clone()).render(out)?;
    for command in fleet.get_subcommands() {
        section(command, "fleet", out)?;
    }
    Ok(())
}

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

    use crate::Cli;

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
