//! The server's modules form layers: each uses only the modules below it
//! (the order in `LAYERS`, as lib.rs describes them), so there is no import
//! cycle, and below `web` nothing knows axum or the web state. Read from the
//! source tree; test code (after `#[cfg(test)]`) is not counted.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Highest first: a module may use any module after it, none before.
const LAYERS: [&str; 12] = [
    "cli",
    "web",
    "jobs",
    "alerts",
    "processing",
    "receiver",
    "events",
    "db",
    "config",
    "telemetry",
    "providers",
    "secret",
];

fn src() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("src")
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The crate's top-level module a file belongs to (None for lib.rs, main.rs).
fn top_module(path: &Path) -> Option<String> {
    let relative = path.strip_prefix(src()).unwrap();
    let first = relative.components().next()?.as_os_str().to_str()?;
    let name = first.trim_end_matches(".rs");
    (!matches!(name, "lib" | "main")).then(|| name.to_owned())
}

/// The non-test code of a file, with comments dropped.
fn code(path: &Path) -> String {
    let text = std::fs::read_to_string(path).unwrap();
    let text = text.split("#[cfg(test)]").next().unwrap_or_default();
    text.lines()
        .filter(|line| !line.trim_start().starts_with("//"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// Top-level modules a piece of code names through `crate::`.
fn uses(code: &str) -> BTreeSet<String> {
    let mut found = BTreeSet::new();
    for (at, _) in code.match_indices("crate::") {
        let rest = &code[at + "crate::".len()..];
        if let Some(group) = rest.strip_prefix('{') {
            let group = &group[..group.find('}').unwrap_or(group.len())];
            for item in group.split(',') {
                let name: String = item
                    .trim()
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                    .collect();
                found.insert(name);
            }
        } else {
            let name: String = rest
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            found.insert(name);
        }
    }
    found
}

fn imports() -> BTreeMap<String, BTreeSet<String>> {
    let mut files = Vec::new();
    rust_files(&src(), &mut files);
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for file in files {
        let Some(module) = top_module(&file) else {
            continue;
        };
        let used = uses(&code(&file));
        let entry = graph.entry(module.clone()).or_default();
        entry.extend(
            used.into_iter()
                .filter(|u| *u != module && LAYERS.contains(&u.as_str())),
        );
    }
    graph
}

#[test]
fn every_module_has_a_layer() {
    let graph = imports();
    for module in graph.keys() {
        assert!(
            LAYERS.contains(&module.as_str()),
            "module {module} is in no layer: add it to LAYERS and lib.rs's list"
        );
    }
}

#[test]
fn modules_use_only_the_layers_below_them() {
    let rank = |m: &str| LAYERS.iter().position(|l| *l == m).unwrap();
    let mut upward = Vec::new();
    for (module, used) in imports() {
        for target in used {
            if rank(&target) <= rank(&module) {
                upward.push(format!("{module} -> {target}"));
            }
        }
    }
    assert!(upward.is_empty(), "imports against the layers: {upward:?}");
}

#[test]
fn below_web_nothing_knows_axum() {
    let mut files = Vec::new();
    rust_files(&src(), &mut files);
    for file in files {
        let module = top_module(&file).unwrap_or_default();
        if matches!(module.as_str(), "web" | "cli" | "") {
            continue;
        }
        let code = code(&file);
        for banned in ["axum", "AppState", "leptos_axum"] {
            assert!(!code.contains(banned), "{} names {banned}", file.display());
        }
    }
}

/// An event's forwarding state, and a destination's gate and breaker, have
/// one owner: only `events` writes dispatches and gates (the demo seeder
/// only moves its history's times back). The dashboard's crate reads them.
#[test]
fn only_the_events_module_writes_dispatches() {
    let mut files = Vec::new();
    rust_files(&src(), &mut files);
    rust_files(&src().join("../../app/src"), &mut files);
    let mut writers = Vec::new();
    for file in files {
        let module = file
            .strip_prefix(src())
            .ok()
            .and_then(|_| top_module(&file))
            .unwrap_or_default();
        let seeder = file.ends_with("cli/seed.rs");
        let code = code(&file)
            .to_lowercase()
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" ");
        for write in [
            "update dispatches",
            "insert into dispatches",
            "delete from dispatches",
            "update destination_gates",
            "insert into destination_gates",
            "delete from destination_gates",
        ] {
            if code.contains(write)
                && module != "events"
                && !(seeder && write == "update dispatches")
            {
                writers.push(format!("{}: {write}", file.display()));
            }
        }
    }
    assert!(
        writers.is_empty(),
        "dispatches written outside events: {writers:?}"
    );
}
