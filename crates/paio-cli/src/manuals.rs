//! Manual pages and shell completions, generated from the clap definitions
//! the programs parse (so they cannot drift from `--help`): `paio man DIR`
//! (what `make install` runs) and `paio completions SHELL [PROGRAM]`.

use std::io::{self, Write};
use std::path::{Path, PathBuf};

use clap::CommandFactory;

/// A program whose manual and completions paio can write.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Program {
    /// The `paio` command.
    Paio,
    /// The `paiod` daemon.
    Paiod,
}

/// `paiod`'s command line.
fn paiod() -> clap::Command {
    paio_control::cli::Args::command()
}

/// Writes the manual pages into `dir`: `paio.1`, one `paio-SUB.1` per
/// visible subcommand of `paio` (whose definition is `paio`), and
/// `paiod.8`. Returns the files written.
pub fn write_man_pages(paio: clap::Command, dir: &Path) -> io::Result<Vec<PathBuf>> {
    std::fs::create_dir_all(dir)?;
    let mut written = Vec::new();
    let mut page = |cmd: clap::Command, file: String, section: &str| -> io::Result<()> {
        let path = dir.join(&file);
        let mut out = Vec::new();
        clap_mangen::Man::new(cmd)
            .section(section)
            .render(&mut out)?;
        std::fs::write(&path, out)?;
        written.push(path);
        Ok(())
    };
    let paio = paio.name("paio");
    for sub in paio.get_subcommands().filter(|s| !s.is_hide_set()) {
        let name = format!("paio-{}", sub.get_name());
        // The page is paio-SUB; its synopsis says how it is typed.
        let typed = format!("paio {}", sub.get_name());
        page(
            sub.clone().name(name.clone()).bin_name(typed),
            format!("{name}.1"),
            "1",
        )?;
    }
    page(paio, "paio.1".into(), "1")?;
    page(paiod(), "paiod.8".into(), "8")?;
    Ok(written)
}

/// Writes `program`'s completion script for `shell` to `out`; `paio` is
/// paio's own definition.
pub fn write_completions(
    paio: clap::Command,
    program: Program,
    shell: clap_complete::Shell,
    out: &mut dyn Write,
) {
    let (mut cmd, name) = match program {
        Program::Paio => (paio, "paio"),
        Program::Paiod => (paiod(), "paiod"),
    };
    clap_complete::generate(shell, &mut cmd, name, out);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn paio() -> clap::Command {
        clap::Command::new("paio")
            .about("test")
            .subcommand(clap::Command::new("run").about("run it"))
            .subcommand(clap::Command::new("man").hide(true))
    }

    #[test]
    fn one_page_per_visible_subcommand_and_paiods_in_section_8() {
        let dir = tempfile::tempdir().unwrap();
        let written = write_man_pages(paio(), dir.path()).unwrap();
        let names: Vec<String> = written
            .iter()
            .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
            .collect();
        assert_eq!(names, ["paio-run.1", "paio.1", "paiod.8"]);
        let run = std::fs::read_to_string(dir.path().join("paio-run.1")).unwrap();
        assert!(
            run.contains(".TH paio-run 1") && run.contains("run it"),
            "{run}"
        );
        // The synopsis is what a user types.
        assert!(run.contains(".SH SYNOPSIS\n\\fBpaio run\\fR"), "{run}");
        let paiod = std::fs::read_to_string(dir.path().join("paiod.8")).unwrap();
        assert!(
            paiod.contains(".TH paiod 8") && paiod.contains("check\\-config"),
            "{paiod}"
        );
    }

    #[test]
    fn completions_name_their_program() {
        for (program, name) in [(Program::Paio, "paio"), (Program::Paiod, "paiod")] {
            let mut out = Vec::new();
            write_completions(paio(), program, clap_complete::Shell::Zsh, &mut out);
            let text = String::from_utf8(out).unwrap();
            assert!(text.starts_with(&format!("#compdef {name}")), "{text}");
        }
    }
}
