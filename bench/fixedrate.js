#!/usr/bin/env node
// Fixed-rate, open-loop HTTP/1.1 load generator for bench/run (wrk cannot hold a
// fixed rate, and Debian ships neither wrk2 nor vegeta; h2load repeats one request,
// i.e. one webhook-id, so every request after the first would be a duplicate).
//
// Replays the reference request file (gen_requests.py: id, timestamp, signature,
// body per line) from its first line, request i scheduled at t0 + i/RATE. A due
// request goes out on an idle keep-alive connection, else on a new one (up to
// --max-conns), else it waits in a queue: the server being slow never delays the
// schedule. Latency is measured from the SCHEDULED send time to the last byte of
// the answer, so time spent queued counts (no coordinated omission). "lag" is how
// late the generator's timer handed each request out (timer granularity, its own
// CPU starved by others): it is part of the latency figures, so a lag p99 near the
// latency p99 means the generator, not the server, is the limit.
//
// The first --lead-in seconds run at the same rate but are left out of the figures
// (a server's pools and caches fill up); every request counts for the status tally.
// Usage: node fixedrate.js --url http://127.0.0.1:3401 --path /hooks/bench \
//          --reqs requests.tsv [--rate 1000] [--duration 20] [--lead-in 2] [--conns 16] [--max-conns 256]
//          [--timeline FILE (per-second p50/p99/max)]
// Prints a human summary and one "RESULT k=v ..." line (same keys as wrk.lua's where
// they mean the same thing).
'use strict';
const fs = require('node:fs');
const net = require('node:net');
const { performance } = require('node:perf_hooks');
const v8 = require('node:v8'), vm = require('node:vm');

function fullGc() {
  v8.setFlagsFromString('--expose-gc');
  vm.runInNewContext('gc')();
}

function args() {
  const a = { url: 'http://127.0.0.1:3000', path: '/webhooks/bench', reqs: 'requests.tsv',
    rate: 1000, duration: 20, 'lead-in': 2, conns: 16, 'max-conns': 256, drain: 10, timeline: '' };
  const v = process.argv.slice(2);
  for (let i = 0; i < v.length; i += 2) {
    const k = v[i].replace(/^--/, '');
    if (!(k in a) || v[i + 1] === undefined) { console.error(`unknown or empty option ${v[i]}`); process.exit(2); }
    a[k] = typeof a[k] === 'number' ? Number(v[i + 1]) : v[i + 1];
  }
  return a;
}

const A = args();
const u = new URL(A.url);
const HOST = u.hostname, PORT = Number(u.port || 80);
const LEAD = Math.round(A.rate * A['lead-in']);            // sent at the rate, not in the figures
const TOTAL = LEAD + Math.round(A.rate * A.duration);
const INTERVAL = 1000 / A.rate; // ms

// Pre-format every request once: the hot path only writes a Buffer. Inside a
// function, so the file's text (hundreds of MB) is garbage before the clock
// starts: a big live heap made every young-generation GC pause the generator
// for 20+ ms, which showed as latency spikes every ~5 s.
function load() {
  const lines = fs.readFileSync(A.reqs, 'utf8').split('\n', TOTAL + 1).filter((l) => l.length > 0);
  if (lines.length < TOTAL) console.error(`note: ${A.reqs} has ${lines.length} lines for ${TOTAL} requests: wrapping`);
  const reqs = new Array(TOTAL), ids = new Array(TOTAL);
  for (let i = 0; i < TOTAL; i++) {
    const [id, ts, sig, body] = lines[i % lines.length].split('\t');
    const b = Buffer.from(body, 'utf8');
    ids[i] = Buffer.from(id, 'latin1').toString('latin1');  // a copy: a slice would keep the file's text alive
    reqs[i] = Buffer.concat([Buffer.from(
      `POST ${A.path} HTTP/1.1\r\nHost: ${u.host}\r\nContent-Type: application/json\r\n` +
      `webhook-id: ${id}\r\nwebhook-timestamp: ${ts}\r\nwebhook-signature: ${sig}\r\n` +
      `Content-Length: ${b.length}\r\n\r\n`, 'latin1'), b]);
  }
  return { reqs, ids };
}
const { reqs, ids } = load();

const sched = new Float64Array(TOTAL);  // scheduled send time (ms, performance.now())
const lat = new Float64Array(TOTAL).fill(NaN);   // scheduled -> answer complete
const lag = new Float64Array(TOTAL).fill(NaN);   // scheduled -> handed to a connection or the queue
const tally = { ok: 0, dup: 0, c409: 0, c4xx: 0, c5xx: 0, other: 0, sockerr: 0, connerr: 0 };
const outcomes = {};
let sent = 0, done = 0, opened = 0, maxQueue = 0;
const idle = [], queue = [];
const conns = new Set();

function record(i, status, headers, body) {
  lat[i] = performance.now() - sched[i];
  done++;
  const oc = headers['x-replaysafe-outcome'];
  if (oc) outcomes[oc] = (outcomes[oc] || 0) + 1;
  if (status === 200) {
    if (oc) { if (oc === 'claimed') tally.ok++; else tally.dup++; }
    else if (/^[Aa]lready/.test(body.toString('utf8', 0, Math.min(body.length, 64)))) tally.dup++; else tally.ok++;
  } else if (status === 409) tally.c409++;
  else if (status >= 400 && status < 500) tally.c4xx++;
  else if (status >= 500) tally.c5xx++;
  else tally.other++;
}

// The answer headers the tally reads, with the text that finds each one.
const WANTED = ['transfer-encoding', 'content-length', 'connection', 'x-replaysafe-outcome']
  .map((name) => [name, `\r\n${name}:`]);

// One keep-alive connection with at most one request in flight (no pipelining).
class Conn {
  constructor() {
    this.cur = -1; this.buf = Buffer.alloc(0); this.ready = false;
    this.sock = net.createConnection({ host: HOST, port: PORT });
    this.sock.setNoDelay(true);
    opened++; conns.add(this);
    this.sock.on('connect', () => { this.ready = true; this.next(); });
    this.sock.on('data', (d) => this.onData(d));
    this.sock.on('error', () => {});
    this.sock.on('close', () => this.onClose());
  }
  send(i) {
    this.cur = i; this.buf = Buffer.alloc(0);
    this.sock.write(reqs[i]);
  }
  next() {  // take the oldest queued request, else go idle
    if (queue.length) this.send(queue.shift()); else { this.cur = -1; idle.push(this); }
  }
  onData(d) {
    this.buf = this.buf.length ? Buffer.concat([this.buf, d]) : d;
    for (;;) {
      const end = this.buf.indexOf('\r\n\r\n');
      if (end < 0) return;
      // Lean parsing (one string per answer): garbage here means GC pauses
      // in the generator, which would count as the server's latency.
      const b = this.buf;
      const status = (b[9] - 48) * 100 + (b[10] - 48) * 10 + (b[11] - 48);
      const head = b.toString('latin1', 0, end).toLowerCase();
      const headers = {};
      for (const [name, needle] of WANTED) {
        const k = head.indexOf(needle);
        if (k < 0) continue;
        const e = head.indexOf('\r\n', k + needle.length);
        headers[name] = head.slice(k + needle.length, e < 0 ? head.length : e).trim();
      }
      let body, rest;
      if (headers['transfer-encoding'] && /chunked/i.test(headers['transfer-encoding'])) {
        const parts = []; let p = end + 4;
        for (;;) {
          const le = this.buf.indexOf('\r\n', p);
          if (le < 0) return;
          const n = parseInt(this.buf.subarray(p, le).toString('latin1'), 16);
          if (this.buf.length < le + 2 + n + 2) return;
          if (n === 0) { p = le + 4; break; }
          parts.push(this.buf.subarray(le + 2, le + 2 + n)); p = le + 2 + n + 2;
        }
        body = Buffer.concat(parts); rest = this.buf.subarray(p);
      } else {
        const n = Number(headers['content-length'] || 0);
        if (this.buf.length < end + 4 + n) return;
        body = this.buf.subarray(end + 4, end + 4 + n); rest = this.buf.subarray(end + 4 + n);
      }
      this.buf = rest;
      const i = this.cur;
      if (i >= 0) record(i, status, headers, body);
      if (headers.connection && /close/i.test(headers.connection)) { this.cur = -1; this.sock.end(); return; }
      this.next();
    }
  }
  onClose() {
    conns.delete(this);
    const k = idle.indexOf(this); if (k >= 0) idle.splice(k, 1);
    if (this.cur >= 0) { tally.sockerr++; done++; this.cur = -1; }
    if (!this.ready) tally.connerr++;
    if (queue.length && !stopping) newConn();
  }
}

let stopping = false;
function newConn() { if (conns.size < A['max-conns']) new Conn(); }

function dispatch(i) {
  sent++;
  lag[i] = performance.now() - sched[i];
  const c = idle.pop();
  if (c) { c.send(i); return; }
  queue.push(i);
  if (queue.length > maxQueue) maxQueue = queue.length;
  // Connections still connecting will take queued requests; open more only if short.
  let connecting = 0; for (const x of conns) if (!x.ready) connecting++;
  if (connecting < queue.length) newConn();
}

let t0 = 0, nextI = 0;
function tick() {
  const now = performance.now();
  while (nextI < TOTAL && t0 + nextI * INTERVAL <= now) { sched[nextI] = t0 + nextI * INTERVAL; dispatch(nextI++); }
  if (nextI < TOTAL) setTimeout(tick, Math.max(0, t0 + nextI * INTERVAL - performance.now()));
  else finish(performance.now());
}

function pct(arr, p) {
  const v = Array.from(arr).filter((x) => !Number.isNaN(x)).sort((a, b) => a - b);
  if (!v.length) return NaN;
  return v[Math.min(v.length - 1, Math.ceil((p / 100) * v.length) - 1)];
}

function finish(tEnd) {
  const deadline = tEnd + A.drain * 1000;
  const wait = () => {
    if (done < sent && performance.now() < deadline) { setTimeout(wait, 20); return; }
    stopping = true;
    const timedOut = sent - done;
    for (const c of conns) c.sock.destroy();
    const secs = (tEnd - t0) / 1000;
    const mlat = lat.subarray(LEAD, sent), mlag = lag.subarray(LEAD, sent);  // the measured part
    const distinct = new Set(ids.slice(0, sent)).size;
    const f = (x) => x.toFixed(2);
    const p = (k) => f(pct(mlat, k)), l = (k) => f(pct(mlag, k));
    const oc = Object.entries(outcomes).map(([k, v]) => `${k} ${v}`).join(', ') || 'none';
    console.log(`fixed rate ${A.rate} req/s for ${A['lead-in']}s lead-in + ${A.duration}s measured: sent ${sent} in ${secs.toFixed(1)}s (${(sent / secs).toFixed(0)} req/s), answered ${done - tally.sockerr}, unanswered after ${A.drain}s drain ${timedOut}`);
    console.log(`status: 200 new ${tally.ok}, 200 dup ${tally.dup}, 409 ${tally.c409}, 4xx ${tally.c4xx}, 5xx ${tally.c5xx}, other ${tally.other}, socket errors ${tally.sockerr}, connect errors ${tally.connerr} | x-replaysafe-outcome: ${oc}`);
    console.log(`latency from scheduled send (measured part: ${Math.max(0, sent - LEAD)} requests), ms: p50 ${p(50)}  p90 ${p(90)}  p99 ${p(99)}  p99.9 ${p(99.9)}  max ${p(100)}`);
    console.log(`generator send lag, ms: p50 ${l(50)}  p99 ${l(99)}  max ${l(100)} | connections opened ${opened}, max queued ${maxQueue}`);
    console.log(`distinct ids sent ${distinct}`);
    if (A.timeline) {  // per second of schedule: requests, p50, p99, max latency, max queued at dispatch
      const rows = ['second\trequests\tp50_ms\tp99_ms\tmax_ms'];
      rows.push(`# the first ${A['lead-in']} s are the lead-in, not in the figures`);
      for (let s0 = 0; s0 * A.rate < sent; s0++) {
        const sl = lat.subarray(s0 * A.rate, Math.min(sent, (s0 + 1) * A.rate));
        rows.push(`${s0}\t${sl.length}\t${f(pct(sl, 50))}\t${f(pct(sl, 99))}\t${f(pct(sl, 100))}`);
      }
      fs.writeFileSync(A.timeline, rows.join('\n') + '\n');
    }
    console.log(`RESULT rate=${A.rate} sent=${sent} rps=${(sent / secs).toFixed(0)} p50=${p(50)} p90=${p(90)} p99=${p(99)} p999=${p(99.9)} max=${p(100)} ` +
      `lag50=${l(50)} lag99=${l(99)} ok=${tally.ok} dup=${tally.dup} c409=${tally.c409} c4xx=${tally.c4xx} c5xx=${tally.c5xx} ` +
      `other=${tally.other} sockerr=${tally.sockerr + tally.connerr + timedOut} distinct=${distinct} conns=${opened}`);
    process.exit(0);
  };
  wait();
}

// Open the starting connections, then start the clock.
for (let k = 0; k < A.conns; k++) newConn();
const start = () => {
  if (idle.length < A.conns && performance.now() - boot < 5000) { setTimeout(start, 10); return; }
  fullGc();  // the loading garbage goes now, not during the measured part
  t0 = performance.now() + 50;
  setTimeout(tick, 50);
};
const boot = performance.now();
start();
