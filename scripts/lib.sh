# Shared by scripts/run and scripts/test: idempotent installs and a private
# PostgreSQL for tests. Source it; do not run it.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
WASM_BINDGEN_VERSION=0.2.130     # must equal the wasm-bindgen crate pin in Cargo.toml
SQLX_CLI_VERSION=0.8.6           # must equal the sqlx crate version in Cargo.toml
CARGO_DENY_VERSION=0.20.2
export PATH="$HOME/.cargo/bin:$PATH"

log() { printf '\033[1m==> %s\033[0m\n' "$*" >&2; }
die() { printf 'error: %s\n' "$*" >&2; exit 1; }
as_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }

APT_UPDATED=0
apt_install() {  # apt_install PACKAGE...: installs the Debian packages missing
  local missing=()
  for p in "$@"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
  [ ${#missing[@]} = 0 ] && return 0
  command -v apt-get >/dev/null || die "install ${missing[*]} with your package manager"
  if [ $APT_UPDATED = 0 ]; then as_root apt-get update -qq; APT_UPDATED=1; fi
  log "installing ${missing[*]}"
  DEBIAN_FRONTEND=noninteractive as_root apt-get install -y -qq "${missing[@]}" >/dev/null
}

ensure_build_tools() {
  command -v cargo >/dev/null || die "Rust is needed: install it from https://rustup.rs"
  command -v node >/dev/null && command -v npm >/dev/null || die "Node.js 20 and npm are needed"
  if ! rustup target list --installed 2>/dev/null | grep -q wasm32-unknown-unknown; then
    log "adding the wasm32-unknown-unknown target"
    rustup target add wasm32-unknown-unknown
  fi
  if ! wasm-bindgen --version 2>/dev/null | grep -q "$WASM_BINDGEN_VERSION"; then
    log "installing wasm-bindgen-cli $WASM_BINDGEN_VERSION"
    # Not --locked: its lockfile names a crate version the registry mirror lacks.
    cargo install wasm-bindgen-cli --version "$WASM_BINDGEN_VERSION" --force
  fi
}

ensure_sqlx_cli() {  # only the tests need it (check_sqlx_data)
  if ! cargo sqlx --version 2>/dev/null | grep -q "$SQLX_CLI_VERSION"; then
    log "installing sqlx-cli $SQLX_CLI_VERSION (about 1.5 minutes, once per machine)"
    cargo install sqlx-cli --locked --version "$SQLX_CLI_VERSION" --no-default-features --features postgres,rustls
  fi
}

# The compile-time SQL data in .sqlx must match the queries: a stale copy
# fails here rather than as a build error on someone else's machine.
check_sqlx_data() {
  local db=replaysafe_sqlx
  psql -q "$TEST_PG_URL/postgres" -c "DROP DATABASE IF EXISTS $db WITH (FORCE)" -c "CREATE DATABASE $db"
  DATABASE_URL="$TEST_PG_URL/$db" cargo sqlx migrate run --source "$ROOT/migrations" >/dev/null
  (cd "$ROOT" && DATABASE_URL="$TEST_PG_URL/$db" cargo sqlx prepare --workspace --check)
}

# cargo deny over the RustSec snapshot in deny/advisories (GitHub, where the
# live database is, is out of reach here): made into the git checkout that
# cargo-deny reads at deny.toml's db-path, under the name it gives the
# RustSec URL, dated as the snapshot.
ensure_cargo_deny() {
  if ! cargo deny --version 2>/dev/null | grep -q "$CARGO_DENY_VERSION"; then
    log "installing cargo-deny $CARGO_DENY_VERSION (about 2 minutes, once per machine)"
    cargo install cargo-deny --locked --version "$CARGO_DENY_VERSION"
  fi
}

check_supply_chain() {
  ensure_cargo_deny
  local db=$ROOT/target/advisory-dbs/advisory-db-3157b0e258782691 date
  date=$(awk '/^date/ {print $2}' "$ROOT/deny/advisories/SNAPSHOT")
  rm -rf "$db" && mkdir -p "$db" && cp -r "$ROOT/deny/advisories/." "$db/"
  (cd "$db" && git init -q && git add -A &&
    GIT_AUTHOR_DATE=$date GIT_COMMITTER_DATE=$date \
      git -c user.name=replaysafe -c user.email=ci@localhost commit -qm "RustSec snapshot of $date")
  log "cargo deny check (advisories as of $date, licences, duplicate versions, sources)"
  (cd "$ROOT" && cargo deny --offline check)
}

# Minutes-long steps (a `cargo install`) run beside steps that wait on the
# network or the disk: in_background NAME COMMAND... starts one in its own
# process group, its output kept aside; await_background NAME waits for it,
# shows its output, and stops the script if it failed; stop_background
# (for an EXIT trap) stops those still running, compilers and all.
declare -A BG_PID BG_LOG
in_background() {
  local name=$1; shift
  BG_LOG[$name]=$(mktemp)
  set -m
  ("$@") >"${BG_LOG[$name]}" 2>&1 &
  BG_PID[$name]=$!
  set +m
}
await_background() {
  local name=$1 status=0
  wait "${BG_PID[$name]}" || status=$?
  cat "${BG_LOG[$name]}" >&2
  rm -f "${BG_LOG[$name]}"
  unset "BG_PID[$name]" "BG_LOG[$name]"
  [ "$status" = 0 ] || die "$name failed (exit $status)"
}
# Runs a command at the lowest CPU priority: a build that is not on the
# critical path takes the cores only when the steps that are leave them idle.
niced() { renice -n 19 -p "$BASHPID" >/dev/null; "$@"; }
stop_background() {
  local pid
  for pid in "${BG_PID[@]}"; do kill -TERM -- "-$pid" 2>/dev/null || true; done
  [ ${#BG_LOG[@]} = 0 ] || rm -f "${BG_LOG[@]}"
}

ensure_postgres_binaries() {
  pg_bin_dir >/dev/null && return 0
  apt_install postgresql
  pg_bin_dir >/dev/null || die "PostgreSQL server binaries not found after installing"
}

pg_bin_dir() {  # the directory holding initdb, pg_ctl and postgres
  local d
  for d in $(dirname "$(command -v pg_ctl 2>/dev/null || echo /nonexistent/x)") \
           $(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -t/ -k4 -rn); do
    [ -x "$d/initdb" ] && [ -x "$d/pg_ctl" ] && [ -x "$d/postgres" ] && { echo "$d"; return 0; }
  done
  return 1
}

# The server binary and the hydrated UI bundle, laid out as cargo-leptos lays
# them out (target/site/pkg/replaysafe.{js,wasm,css}), built with plain cargo
# and wasm-bindgen: compiling cargo-leptos itself took a fresh machine longer
# than the whole project (README, "A fresh machine"). Debug only: one build
# shared by scripts/run and scripts/test; `cargo leptos watch` still works
# for development.
build_site() {
  log "building replaysafe (server, then the UI's wasm)"
  (cd "$ROOT" && cargo build -p replaysafe &&
    cargo build -p app --lib --target wasm32-unknown-unknown --no-default-features --features hydrate)
  local pkg=$ROOT/target/site/pkg
  mkdir -p "$pkg"
  wasm-bindgen --target web --no-typescript --out-dir "$pkg" --out-name replaysafe \
    "$ROOT/target/wasm32-unknown-unknown/debug/app.wasm"
  # leptos built with LEPTOS_OUTPUT_NAME (.cargo/config.toml) loads replaysafe.wasm
  mv -f "$pkg/replaysafe_bg.wasm" "$pkg/replaysafe.wasm"
  cp "$ROOT/style/main.css" "$pkg/replaysafe.css"
}

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# A private PostgreSQL for the tests: trust auth on a loopback port, data
# under a directory the postgres user can reach even when the repo is in /root.
TEST_PG_DIR=${TEST_PG_DIR:-/tmp/replaysafe-test-pg-$(id -u)}
test_pg_start() {
  local bin; bin=$(pg_bin_dir)
  local run=(); [ "$(id -u)" = 0 ] && run=(runuser -u postgres --)
  mkdir -p "$TEST_PG_DIR"; [ "$(id -u)" = 0 ] && chown postgres: "$TEST_PG_DIR"
  if [ ! -s "$TEST_PG_DIR/data/PG_VERSION" ]; then
    "${run[@]}" "$bin/initdb" -D "$TEST_PG_DIR/data" -U postgres -A trust -E UTF8 --locale=C --no-instructions >/dev/null
  fi
  "${run[@]}" "$bin/pg_ctl" -D "$TEST_PG_DIR/data" -m immediate -w stop >/dev/null 2>&1 || true
  TEST_PG_PORT=$(free_port)
  # Many per-test databases at once: more connections than the default 100;
  # fsync off: a test cluster need not survive a power cut, and tests run faster;
  # pg_stat_statements: tests count the statements a burst of work costs.
  (cd "$TEST_PG_DIR" && "${run[@]}" "$bin/pg_ctl" -D "$TEST_PG_DIR/data" -l "$TEST_PG_DIR/server.log" -w -t 60 \
    -o "-p $TEST_PG_PORT -c listen_addresses=127.0.0.1 -c unix_socket_directories='' -c max_connections=400 -c shared_buffers=256MB -c fsync=off -c full_page_writes=off -c shared_preload_libraries=pg_stat_statements" start >/dev/null)
  export TEST_PG_URL="postgres://postgres@127.0.0.1:$TEST_PG_PORT"
  log "test PostgreSQL on 127.0.0.1:$TEST_PG_PORT"
}
test_pg_stop() {
  local bin; bin=$(pg_bin_dir) || return 0
  local run=(); [ "$(id -u)" = 0 ] && run=(runuser -u postgres --)
  (cd "$TEST_PG_DIR" && "${run[@]}" "$bin/pg_ctl" -D "$TEST_PG_DIR/data" -m fast -w stop >/dev/null 2>&1) || true
}
