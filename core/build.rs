//! The commit a build is of, for `--version` and `replaysafe_build_info`:
//! `git rev-parse` at build time ("unknown" outside a checkout).
fn main() {
    let commit = std::process::Command::new("git")
        .args(["rev-parse", "--short=12", "HEAD"])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
        .filter(|c| !c.is_empty())
        .unwrap_or_else(|| "unknown".into());
    println!("cargo:rustc-env=REPLAYSAFE_COMMIT={commit}");
    // Built again when HEAD moves (a commit, a checkout); only paths that
    // exist, as cargo reruns a script every build for a missing one.
    for path in ["../.git/HEAD", "../.git/refs/heads", "../.git/packed-refs"] {
        if std::path::Path::new(path).exists() {
            println!("cargo:rerun-if-changed={path}");
        }
    }
}
