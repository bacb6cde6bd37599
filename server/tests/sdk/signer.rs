//! Runs the providers' official SDK signers (`sign.mjs` under node, `sign.py`
//! under python3; README.md gives the JSON they read and write). Included by
//! the provider contract's unit tests and by the API tests, so both drive the
//! signers one way.

use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Stdio};

use serde_json::Value;

/// Signs requests with an SDK script; one answer per request, in order.
pub fn sdk_sign(script: &str, requests: Value) -> Vec<Value> {
    // Included by the server's tests and by the core's provider contract.
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../server/tests/sdk");
    assert!(
        dir.join("node_modules").exists() && dir.join(".venv").exists(),
        "the provider SDKs are not installed: run server/tests/sdk/setup.sh (scripts/test does)"
    );
    let interpreter = if script.ends_with(".mjs") {
        "node"
    } else {
        "python3"
    };
    let mut child = Command::new(interpreter)
        .arg(dir.join(script))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("running the SDK signer");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(requests.to_string().as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{script}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice::<Vec<Value>>(&out.stdout).unwrap()
}
