# What bench/run and bench/pipeline need, installed when missing (idempotent):
# wrk, sysstat, curl, PostgreSQL 15, the request generator's standardwebhooks,
# the Node reference's packages. Expects $REF (bench/reference).
bench_install() {
  pkgs=()
  command -v wrk >/dev/null || pkgs+=(wrk)
  command -v pidstat >/dev/null || pkgs+=(sysstat)
  command -v curl >/dev/null || pkgs+=(curl)
  [ -x /usr/lib/postgresql/15/bin/postgres ] && command -v pgbench >/dev/null && command -v psql >/dev/null || pkgs+=(postgresql-15 postgresql-client-15)
  if [ ${#pkgs[@]} -gt 0 ]; then
    echo "installing ${pkgs[*]} (apt-get)"
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${pkgs[@]}" >/dev/null
  fi
  if [ "$(python3 -c 'from importlib.metadata import version; print(version("standardwebhooks"))' 2>/dev/null)" != 1.1.0 ]; then
    echo "installing standardwebhooks 1.1.0 (pip)"
    python3 -m pip install -q 'standardwebhooks==1.1.0'
  fi
  lock_sum=$(sha256sum "$REF/node-reference/package-lock.json" | cut -d' ' -f1)
  if [ "$(cat "$REF/node-reference/node_modules/.bench-lock-sha256" 2>/dev/null)" != "$lock_sum" ]; then
    echo "installing the node reference's packages (npm ci)"
    (cd "$REF/node-reference" && npm ci --no-audit --no-fund --loglevel=error)
    echo "$lock_sum" > "$REF/node-reference/node_modules/.bench-lock-sha256"
  fi
}
