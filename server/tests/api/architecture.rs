//! The workspace's layers, read from its manifests and source trees (test
//! code included): four crates with arrows one way, `types <- core <-
//! app <- server`; inside `core` and `server`, modules that use only the
//! modules below them (the order in each lib.rs's list), so there is no
//! import cycle; no web framework below `app`; and one owner of the
//! dispatches' and gates' states.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Each crate's directory, its package name, and the workspace crates it
/// may depend on.
const CRATES: [(&str, &str, &[&str]); 4] = [
    ("types", "replaysafe-types", &[]),
    ("core", "replaysafe-core", &["replaysafe-types"]),
    ("app", "app", &["replaysafe-types", "replaysafe-core"]),
    (
        "server",
        "replaysafe",
        &["replaysafe-types", "replaysafe-core", "app"],
    ),
];

/// `core`'s modules, highest first: a module may use any after it, none before.
const CORE_LAYERS: [&str; 15] = [
    "jobs",
    "ops",
    "reconcile",
    "alerts",
    "processing",
    "receiver",
    "incidents",
    "events",
    "db",
    "accounts",
    "config",
    "telemetry",
    "providers",
    "secret",
    "error",
];

/// `server`'s modules, highest first.
const SERVER_LAYERS: [&str; 2] = ["cli", "web"];

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut dirs = vec![dir.to_owned()];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                out.push(path);
            }
        }
    }
    out.sort();
    out
}

/// A file's code, tests included, with comments dropped.
fn code(path: &Path) -> String {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .filter(|line| !line.trim_start().starts_with("//"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The crate's top-level module a file belongs to (None for lib.rs, main.rs).
fn top_module(src: &Path, path: &Path) -> Option<String> {
    let relative = path.strip_prefix(src).unwrap();
    let first = relative.components().next()?.as_os_str().to_str()?;
    let name = first.trim_end_matches(".rs");
    (!matches!(name, "lib" | "main")).then(|| name.to_owned())
}

/// Top-level modules a piece of code names through `crate::`.
fn uses(code: &str) -> BTreeSet<String> {
    let name = |s: &str| -> String {
        s.trim()
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect()
    };
    let mut found = BTreeSet::new();
    for (at, _) in code.match_indices("crate::") {
        let rest = &code[at + "crate::".len()..];
        match rest.strip_prefix('{') {
            Some(group) => {
                let group = &group[..group.find('}').unwrap_or(group.len())];
                found.extend(group.split(',').map(name));
            }
            None => {
                found.insert(name(rest));
            }
        }
    }
    found
}

/// The imports against `layers` in the crate at `dir`, and the modules in no layer.
fn layer_breaches(dir: &str, layers: &[&str]) -> (Vec<String>, BTreeSet<String>) {
    let src = root().join(dir).join("src");
    let rank = |m: &str| layers.iter().position(|l| *l == m);
    let (mut upward, mut unplaced) = (Vec::new(), BTreeSet::new());
    for file in rust_files(&src) {
        let Some(module) = top_module(&src, &file) else {
            continue;
        };
        let Some(own) = rank(&module) else {
            unplaced.insert(module);
            continue;
        };
        for used in uses(&code(&file)) {
            if let Some(target) = rank(&used) {
                if target <= own && used != module {
                    upward.push(format!("{}: {module} -> {used}", file.display()));
                }
            }
        }
    }
    (upward, unplaced)
}

/// A manifest's dependencies (normal, dev and build), by package name,
/// each with whether it is optional.
fn dependencies(dir: &str) -> BTreeMap<String, bool> {
    let text = std::fs::read_to_string(root().join(dir).join("Cargo.toml")).unwrap();
    let manifest: toml::Table = text.parse().unwrap();
    let mut out = BTreeMap::new();
    for table in ["dependencies", "dev-dependencies", "build-dependencies"] {
        let Some(deps) = manifest.get(table).and_then(|t| t.as_table()) else {
            continue;
        };
        for (key, spec) in deps {
            let package = spec
                .get("package")
                .and_then(|p| p.as_str())
                .unwrap_or(key)
                .to_owned();
            let optional = spec
                .get("optional")
                .and_then(|o| o.as_bool())
                .unwrap_or(false);
            out.insert(package, optional && table == "dependencies");
        }
    }
    out
}

#[test]
fn crates_depend_one_way() {
    let ours: Vec<&str> = CRATES.iter().map(|(_, package, _)| *package).collect();
    for (dir, package, allowed) in CRATES {
        for (dependency, _) in dependencies(dir) {
            if ours.contains(&dependency.as_str()) {
                assert!(
                    allowed.contains(&dependency.as_str()),
                    "{package} depends on {dependency}: the arrows are types <- core <- app <- server"
                );
            }
        }
    }
}

#[test]
fn no_web_framework_below_app_and_nothing_server_side_in_types() {
    let web = [
        "axum",
        "leptos",
        "leptos_axum",
        "leptos_meta",
        "leptos_router",
        "server_fn",
    ];
    for dependency in dependencies("core").keys() {
        assert!(
            !web.contains(&dependency.as_str()),
            "core depends on {dependency}"
        );
    }
    // The types build for the browser: anything server-side is an opt-in feature.
    for (dependency, optional) in dependencies("types") {
        assert!(
            optional
                || ["serde", "serde_json", "chrono", "chrono-tz"].contains(&dependency.as_str()),
            "types depends on {dependency} unconditionally: it must build for wasm"
        );
    }
    for (dir, banned) in [
        (
            "core",
            &["axum", "leptos", "AppState", "app::", "replaysafe::"][..],
        ),
        ("types", &["replaysafe_core", "leptos", "axum", "tokio"][..]),
    ] {
        for file in rust_files(&root().join(dir).join("src")) {
            let code = code(&file);
            for word in banned {
                assert!(!code.contains(word), "{} names {word}", file.display());
            }
        }
    }
}

#[test]
fn modules_use_only_the_layers_below_them() {
    for (dir, layers) in [("core", &CORE_LAYERS[..]), ("server", &SERVER_LAYERS[..])] {
        let (upward, unplaced) = layer_breaches(dir, layers);
        assert!(
            unplaced.is_empty(),
            "{dir}: modules in no layer (add them to the layers and lib.rs's list): {unplaced:?}"
        );
        assert!(
            upward.is_empty(),
            "{dir}: imports against the layers: {upward:?}"
        );
    }
}

/// The check can fail: a layer list turned upside down breaches it.
#[test]
fn the_layer_check_sees_a_breach() {
    let mut reversed = CORE_LAYERS;
    reversed.reverse();
    assert!(!layer_breaches("core", &reversed).0.is_empty());
}

/// An incident's state has one owner: only `core::incidents` writes
/// incidents and the events they hold (the migrations make the tables).
#[test]
fn only_the_incidents_module_writes_incidents() {
    let owner = root().join("core/src/incidents.rs");
    let mut writers = Vec::new();
    for (dir, _, _) in CRATES {
        for file in rust_files(&root().join(dir).join("src")) {
            let code = code(&file)
                .to_lowercase()
                .split_whitespace()
                .collect::<Vec<_>>()
                .join(" ");
            for table in ["incidents", "incident_events"] {
                for verb in ["update", "insert into", "delete from"] {
                    if code.contains(&format!("{verb} {table} ")) && file != owner {
                        writers.push(format!("{} ({verb} {table})", file.display()));
                    }
                }
            }
        }
    }
    assert!(writers.is_empty(), "{writers:?}");
}

/// An event's forwarding state, and a destination's gate and breaker, have
/// one owner: only `core::events` writes dispatches and gates (the demo
/// seeder only moves its history's times back). The rest read them.
#[test]
fn only_the_events_module_writes_dispatches() {
    let events = root().join("core/src/events");
    let mut writers = Vec::new();
    for (dir, _, _) in CRATES {
        for file in rust_files(&root().join(dir).join("src")) {
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
                    && !file.starts_with(&events)
                    && !(seeder && write == "update dispatches")
                {
                    writers.push(format!("{}: {write}", file.display()));
                }
            }
        }
    }
    assert!(
        writers.is_empty(),
        "dispatches written outside core::events: {writers:?}"
    );
}
