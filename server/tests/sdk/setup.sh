#!/usr/bin/env bash
# Installs the official provider SDKs used by sign.mjs (npm) and sign.py (PyPI).
# Idempotent: does nothing when node_modules/ and .venv/ match package-lock.json
# and requirements.txt. Quiet on success; on failure prints the tool's output
# and exits non-zero. Safe to run from several processes at once.
set -euo pipefail

DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cd "$DIR"

die() { echo "tests/sdk/setup.sh: $*" >&2; exit 1; }

for tool in node npm python3 sha256sum; do
  command -v "$tool" >/dev/null 2>&1 || die "'$tool' is not installed (needed for the SDK signers)"
done

# One installer at a time (parallel test runs share this folder).
if command -v flock >/dev/null 2>&1; then
  exec 9>"$DIR/.setup.lock"
  flock 9
fi

LOG="$(mktemp)"
trap 'rm -f "$LOG"' EXIT
run() { # run CMD...: quiet unless it fails
  if ! "$@" >"$LOG" 2>&1; then
    cat "$LOG" >&2
    die "failed: $*"
  fi
}

# --- npm: stamp = lockfile + package.json + node version -------------------
npm_want="$( { cat package.json; cat package-lock.json 2>/dev/null || true; node --version; } | sha256sum | cut -d' ' -f1)"
npm_stamp="node_modules/.replaysafe-setup-stamp"
if [[ ! -f "$npm_stamp" || "$(cat "$npm_stamp")" != "$npm_want" ]]; then
  rm -rf node_modules
  if [[ -f package-lock.json ]]; then
    run npm ci --no-audit --no-fund --ignore-scripts --loglevel=error
  else
    run npm install --no-audit --no-fund --ignore-scripts --loglevel=error --omit-lockfile-registry-resolved
    npm_want="$( { cat package.json; cat package-lock.json; node --version; } | sha256sum | cut -d' ' -f1)"
  fi
  echo "$npm_want" >"$npm_stamp"
fi

# --- PyPI: stamp = requirements.txt + python version -----------------------
py_want="$( { cat requirements.txt; python3 -c 'import sys; print(sys.version)'; } | sha256sum | cut -d' ' -f1)"
py_stamp=".venv/.replaysafe-setup-stamp"
if [[ ! -f "$py_stamp" || "$(cat "$py_stamp")" != "$py_want" || ! -x .venv/bin/python ]]; then
  rm -rf .venv
  run python3 -m venv .venv
  [[ -x .venv/bin/python ]] || die "python3 -m venv made no .venv/bin/python (Debian: apt-get install python3-venv)"
  run .venv/bin/python -m pip install --disable-pip-version-check --no-input -q -r requirements.txt
  echo "$py_want" >"$py_stamp"
fi
