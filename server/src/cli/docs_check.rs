//! The docs hold the CLI to its word: every `replaysafe ...` line in a
//! fenced `sh` block of the README and docs/ parses as the real parser
//! parses it, in the current spelling, with no pipeline, `&&` or `;` joining
//! commands that are not real ones (`jobs list | show 12`, pasted, would run
//! `show`). The command table is checked, and run, by the API tests
//! (`cli_grammar`).

use std::path::{Path, PathBuf};

use clap::{CommandFactory, Parser};

use super::Cli;

fn repository() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the workspace")
        .to_owned()
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The first words of commands a doc may pipe into or chain with, besides
/// `replaysafe` (each a real program that the docs use so).
const OTHER_PROGRAMS: &[&str] = &[
    ".",
    "adduser",
    "apt",
    "apt-get",
    "cargo",
    "cd",
    "cp",
    "curl",
    "dpkg",
    "echo",
    "editor",
    "export",
    "git",
    "install",
    "jq",
    "mkdir",
    "npm",
    "npx",
    "openssl",
    "pg_dump",
    "pg_restore",
    "podman",
    "printf",
    "psql",
    "set",
    "sudo",
    "systemctl",
    "tar",
];

/// Joins backslash-continued lines and drops comments and prompts.
fn shell_lines(block: &str) -> Vec<String> {
    let mut lines = Vec::new();
    let mut current = String::new();
    for line in block.lines() {
        let line = line.trim();
        let line = line.strip_prefix("$ ").unwrap_or(line);
        if let Some(start) = line.strip_suffix('\\') {
            current.push_str(start);
            current.push(' ');
            continue;
        }
        current.push_str(line);
        let whole = std::mem::take(&mut current);
        if !whole.trim().is_empty() && !whole.trim_start().starts_with('#') {
            lines.push(whole);
        }
    }
    lines
}

/// Each command of a line, split at unquoted `|`, `||`, `&&` and `;`.
fn commands_of(line: &str) -> Result<Vec<Vec<String>>, String> {
    let words = shlex::split(line).ok_or_else(|| format!("does not parse: {line}"))?;
    let mut commands = vec![Vec::new()];
    for word in words {
        if word.starts_with('#') {
            break;
        }
        if ["|", "||", "&&", ";"].contains(&word.as_str()) {
            commands.push(Vec::new());
        } else if let Some(w) = word.strip_suffix(';') {
            commands.last_mut().expect("one").push(w.to_owned());
            commands.push(Vec::new());
        } else {
            commands.last_mut().expect("one").push(word);
        }
    }
    Ok(commands.into_iter().filter(|c| !c.is_empty()).collect())
}

#[test]
fn every_shell_line_in_the_docs_parses_and_names_real_commands() {
    let root = repository();
    let mut files = vec![root.join("README.md")];
    let mut docs: Vec<PathBuf> = std::fs::read_dir(root.join("docs"))
        .expect("docs/")
        .map(|e| e.expect("an entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .collect();
    docs.sort();
    files.extend(docs);
    let mut checked = 0;
    let mut problems = Vec::new();
    for file in &files {
        let text = read(file);
        for block in text.split("```sh\n").skip(1) {
            let block = block.split("```").next().unwrap_or_default();
            for line in shell_lines(block) {
                let (replaysafe_lines, found) = line_problems(&line);
                checked += replaysafe_lines;
                problems.extend(
                    found
                        .into_iter()
                        .map(|p| format!("{}: {p}", file.display())),
                );
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    assert!(checked > 50, "only {checked} replaysafe lines found");
}

/// What is wrong with one shell line, and how many `replaysafe` commands it
/// holds.
fn line_problems(line: &str) -> (usize, Vec<String>) {
    let commands = match commands_of(line) {
        Ok(c) => c,
        Err(e) => return (0, vec![e]),
    };
    let mut checked = 0;
    let mut problems = Vec::new();
    for command in commands {
        // Leading VAR=value assignments are the environment.
        let words: Vec<&String> = command
            .iter()
            .skip_while(|w| {
                w.split_once('=').is_some_and(|(name, _)| {
                    !name.is_empty() && name.chars().all(|c| c.is_ascii_uppercase() || c == '_')
                })
            })
            .collect();
        let Some(program) = words.first() else {
            continue;
        };
        let name = Path::new(program.as_str())
            .file_name()
            .map_or_else(|| program.to_string(), |n| n.to_string_lossy().into_owned());
        if name == "replaysafe" {
            checked += 1;
            let old = Cli::command()
                .get_subcommands()
                .any(|c| c.is_hide_set() && words.get(1).is_some_and(|w| *w == c.get_name()));
            if old {
                problems.push(format!(
                    "`{line}`: an old spelling (see the table of old spellings)"
                ));
            }
            use clap::error::ErrorKind;
            match Cli::try_parse_from(words.iter().map(|w| w.as_str())) {
                Err(e)
                    if !matches!(e.kind(), ErrorKind::DisplayHelp | ErrorKind::DisplayVersion) =>
                {
                    problems.push(format!(
                        "`{line}`: {}",
                        e.to_string().lines().next().unwrap_or_default()
                    ))
                }
                _ => {}
            }
        } else if !(OTHER_PROGRAMS.contains(&name.as_str())
            // A command substitution's words are not split here.
            || line.contains("$(")
            || program.starts_with("./scripts/")
            || program.starts_with("scripts/")
            || program.starts_with("bench/"))
        {
            problems.push(format!(
                "`{line}` runs `{program}`: a pipeline by accident? (a real program the docs use goes into OTHER_PROGRAMS)"
            ));
        }
    }
    (checked, problems)
}

#[test]
fn a_pipeline_by_accident_and_a_made_up_command_are_caught() {
    assert_eq!(
        line_problems("replaysafe jobs list").1,
        Vec::<String>::new()
    );
    assert_eq!(
        line_problems("printf '%s\\n' \"$P\" | replaysafe users add --username a --role viewer"),
        (1, Vec::new())
    );
    let (_, piped) = line_problems("replaysafe jobs list | show 12");
    assert!(piped[0].contains("runs `show`"), "{piped:?}");
    let (_, made_up) = line_problems("replaysafe job list");
    assert!(
        made_up[0].contains("unrecognized subcommand"),
        "{made_up:?}"
    );
    let (_, old) = line_problems("replaysafe token list");
    assert!(old[0].contains("old spelling"), "{old:?}");
    let (_, bad_flag) = line_problems("replaysafe events list --sauce x");
    assert!(bad_flag[0].contains("--sauce"), "{bad_flag:?}");
}
