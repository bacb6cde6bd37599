#!/usr/bin/env python3
"""The final table of bench/run (usage: summary.py RESULTS_DIR [max_other_pct]).

Reads results.tsv (wrk and pgbench runs), fixed.tsv (fixed-rate runs), rss.tsv and
meta.txt from RESULTS_DIR. With RUNS > 1 every figure is the median over the
'clean' runs, as the reference's summarize.py does: a run is clean when processes
outside the benchmark used <= max_other_pct (default 20) % of a core during it;
a figure marked '*' had no clean run and is the median over all runs.
The reference's own median table (reference/summarize.py) follows as detail."""
import csv
import os
import re
import statistics
import subprocess
import sys
from collections import defaultdict

out = sys.argv[1]
limit = float(sys.argv[2]) if len(sys.argv) > 2 else 20
here = os.path.dirname(os.path.abspath(__file__))


def rows(name):
    p = os.path.join(out, name)
    if not os.path.exists(p):
        return []
    with open(p) as f:
        return list(csv.DictReader(f, delimiter="\t"))


def other(r):
    m = re.search(r"other=(\d+)%", r.get("cpu") or "")
    return float(m.group(1)) if m else 0.0


def num(v):
    try:
        return float(v)
    except (TypeError, ValueError):
        return float("nan")


def pick(rs):
    clean = [r for r in rs if other(r) <= limit]
    return (clean, "") if clean else (rs, "*")


def med(rs, k):
    return statistics.median(num(r[k]) for r in rs)


res, fixed, rss = rows("results.tsv"), rows("fixed.tsv"), rows("rss.tsv")
meta = open(os.path.join(out, "meta.txt")).read() if os.path.exists(os.path.join(out, "meta.txt")) else ""
stamp = os.path.basename(os.path.normpath(out))
runs = sorted({r["run"] for r in res + fixed})
layouts = list(dict.fromkeys(r["layout"] for r in res + fixed))
conns = sorted({int(r["conns"]) for r in res})

groups = defaultdict(list)
for r in res:
    groups[(r["layout"], r["server"], int(r["conns"]))].append(r)

SERVERS = [("node-single", "node, one process"), ("node-cluster", "node, two workers"),
           ("replaysafe", "replaysafe"), ("replaysafe-hmac", "replaysafe, declared src"),
           ("replaysafe-base", "replaysafe, baseline"),
           ("pgbench", "pgbench (claim tx)")]
W = 16
print(f"replaysafe receiver benchmark {stamp}: {len(runs)} run(s), req/s (p99 ms) at c connections")
for line in meta.splitlines():
    if line.startswith(("replaysafe commit", "replaysafe baseline", "postgres:", "knobs", "wall time", "start", "end")):
        print("  " + line)

for lay in layouts:
    print()
    print(f"layout {lay}" + (" (median over runs)" if len(runs) > 1 else ""))
    hdr = f"{'':24}" + "".join(f"{'c=' + str(c):>{W}}" for c in conns)
    print(hdr)
    print("-" * len(hdr))
    rps = {}
    for srv, label in SERVERS:
        cells = []
        for c in conns:
            rs = groups.get((lay, srv, c))
            if not rs:
                cells.append(f"{'-':>{W}}")
                continue
            use, mark = pick(rs)
            rps[(srv, c)] = med(use, "rps")
            cells.append(f"{med(use, 'rps'):.0f}{mark} ({med(use, 'p99'):.1f})".rjust(W))
        if any(c.strip() != "-" for c in cells):
            print(f"{label:24}" + "".join(cells))
    for a, b, label in [("replaysafe", "node-single", "replaysafe / node single"),
                        ("replaysafe", "node-cluster", "replaysafe / node 2 wkrs"),
                        ("replaysafe", "pgbench", "replaysafe / pgbench"),
                        ("replaysafe", "replaysafe-base", "replaysafe / baseline"),
                        ("replaysafe-hmac", "replaysafe", "declared / standard")]:
        cells = []
        for c in conns:
            if (a, c) in rps and (b, c) in rps and rps[(b, c)] > 0:
                cells.append(f"{rps[(a, c)] / rps[(b, c)]:.2f}x".rjust(W))
            else:
                cells.append(f"{'-':>{W}}")
        if any(c.strip() != "-" for c in cells):
            print(f"{label:24}" + "".join(cells))

    fx = defaultdict(list)
    for r in fixed:
        if r["layout"] == lay:
            fx[r["server"]].append(r)
    if fx:
        rate = next(iter(fx.values()))[0]["rate"]
        print()
        print(f"fixed rate {rate} req/s, open loop, latency from the scheduled send time (ms):")
        for srv, label in SERVERS:
            if srv not in fx:
                continue
            use, mark = pick(fx[srv])
            m = sorted(use, key=lambda r: num(r["p99"]))[len(use) // 2]
            errs = sum(int(num(m[k])) for k in ("4xx", "5xx", "sockerr") if m[k] not in ("", "-"))
            print(f"  {label:22} p50 {med(use, 'p50'):7.2f}{mark}  p99 {med(use, 'p99'):7.2f}{mark}  "
                  f"p99.9 {med(use, 'p999'):7.2f}  max {med(use, 'max'):7.2f} | achieved {m['rps']} req/s, "
                  f"errors {errs}, generator lag p99 {m['lag99']}")

print()
rs_mem = [r for r in rss if r["server"] == "replaysafe"]
if rs_mem:
    peak = max(num(r["hwm_mb"]) for r in rs_mem)
    per = ", ".join(f"{'c=' + r['what'] if r['what'] != 'fixed' else 'fixed rate'} {num(r['hwm_mb']):.1f}"
                    for r in rs_mem)
    print(f"replaysafe peak RSS (VmHWM): {peak:.1f} MB  (one process per run: {per})")
for srv, label in (("node-single", "node, one process"), ("node-cluster", "node, two workers (3 processes summed)")):
    m = [num(r["hwm_mb"]) for r in rss if r["server"] == srv]
    if m:
        print(f"{label} peak RSS (VmHWM): {max(m):.1f} MB")

# checks: rows == distinct ids sent (pgbench: rows == committed), answers
bad = [f"{r['server']} c={r['conns']} run {r['run']} ({r['rows']} rows, {r['distinct']} sent)"
       for r in res if r["rows"] != r["distinct"]]
bad += [f"{r['server']} fixed rate run {r['run']} ({r['rows']} rows, {r['distinct']} sent)"
        for r in fixed if r["rows"] != r["distinct"]]
print("check rows == distinct ids sent after every run: " + ("ok" if not bad else "MISMATCH: " + "; ".join(bad)))
errs = []
for r in res + fixed:
    if r["server"] == "pgbench":
        continue
    n = {k: int(num(r[k])) for k in ("409", "4xx", "5xx", "sockerr")}
    if any(n.values()):
        where = f"c={r['conns']}" if "conns" in r else "fixed rate"
        errs.append(f"{r['server']} {where} run {r['run']}: " + " ".join(f"{k} {v}" for k, v in n.items() if v))
print("non-200 answers / socket errors: " + ("none" if not errs else "; ".join(errs)))
rs_lines = [r for r in res if r["server"] == "replaysafe"]
if rs_lines:
    print("replaysafe answers (200 claimed / 200 duplicate): " + ", ".join(
        f"c={r['conns']} {r['new']}/{r['dup']}" for r in rs_lines))
oth = [other(r) for r in res + fixed]
if oth:
    print(f"other processes' CPU during the measurements (% of one core): median {statistics.median(oth):.0f}, "
          f"max {max(oth):.0f}; runs with more than {limit:.0f}% are not 'clean'")

# the reference's own median table, as detail
print()
print("detail (reference/summarize.py over results.tsv):")
sys.stdout.flush()
subprocess.run([sys.executable, os.path.join(here, "reference", "summarize.py"),
                os.path.join(out, "results.tsv"), str(limit)], check=False)
