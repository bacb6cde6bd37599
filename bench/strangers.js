#!/usr/bin/env node
// Strangers with made-up credentials for bench/hostile (issue 35, item 8):
// --connections kept-alive connections spread over --addresses loopback
// addresses (127.0.0.2, ...), each sending, in turn, an API request with a
// made-up bearer token and a page request with a made-up session cookie
// (--credentials none: API requests with no credentials), at --rate requests
// a second in all (0: each connection sends its next as soon as the last is
// answered), for --hold seconds. Prints one JSON line: the answers by status.
// In Node rather than bench/hostile.py: at the same rate it takes a fraction
// of the CPU asyncio does, CPU the server measured beside it would lose.
// Usage: node strangers.js --port 3401 [--connections 64] [--addresses 25]
//          [--rate 1000] [--hold 17] [--credentials fake|none]
'use strict';
const net = require('node:net');

const A = { port: 3401, connections: 64, addresses: 25, rate: 1000, hold: 17, credentials: 'fake' };
const argv = process.argv.slice(2);
for (let i = 0; i < argv.length; i += 2) {
  const k = argv[i].replace(/^--/, '');
  if (!(k in A) || argv[i + 1] === undefined) { console.error(`unknown or empty option ${argv[i]}`); process.exit(2); }
  A[k] = typeof A[k] === 'number' ? Number(argv[i + 1]) : argv[i + 1];
}

const counts = {};
const until = Date.now() + A.hold * 1000;
let serial = 0;

function request() {
  serial++;
  if (A.credentials === 'none') return 'GET /api/v1/events HTTP/1.1\r\nHost: x\r\n\r\n';
  return serial % 2
    ? `GET /api/v1/events HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer rs_madeup_${serial}\r\n\r\n`
    : `GET /overview HTTP/1.1\r\nHost: x\r\nCookie: replaysafe_session=madeup${serial}\r\n\r\n`;
}

class Stranger {
  constructor(address) {
    this.address = address; this.busy = false; this.buf = Buffer.alloc(0); this.open();
  }
  open() {
    if (Date.now() >= until) return;
    this.busy = false; this.buf = Buffer.alloc(0);
    this.sock = net.createConnection({ host: '127.0.0.1', port: A.port, localAddress: this.address });
    this.sock.setNoDelay(true);
    this.sock.on('connect', () => { if (!A.rate) this.send(); });
    this.sock.on('data', (d) => this.onData(d));
    this.sock.on('error', () => {});
    this.sock.on('close', () => setTimeout(() => this.open(), 100));
  }
  send() {
    if (this.busy || this.sock.connecting || this.sock.destroyed) return false;
    this.busy = true;
    this.sock.write(request());
    return true;
  }
  onData(d) {
    this.buf = this.buf.length ? Buffer.concat([this.buf, d]) : d;
    for (;;) {
      const end = this.buf.indexOf('\r\n\r\n');
      if (end < 0) return;
      const head = this.buf.toString('latin1', 0, end).toLowerCase();
      const m = /\r\ncontent-length:\s*(\d+)/.exec(head);
      const length = m ? Number(m[1]) : 0;
      if (this.buf.length < end + 4 + length) return;
      const status = head.slice(9, 12);
      counts[status] = (counts[status] || 0) + 1;
      this.buf = this.buf.subarray(end + 4 + length);
      this.busy = false;
      if (!A.rate && Date.now() < until) this.send();
    }
  }
}

const strangers = [];
for (let i = 0; i < A.connections; i++) strangers.push(new Stranger(`127.0.0.${2 + (i % A.addresses)}`));

let skipped = 0;
if (A.rate) {
  // Every millisecond-ish tick sends what is due, on the next free connection.
  const t0 = Date.now();
  let due = 0, next = 0;
  const timer = setInterval(() => {
    const now = Date.now();
    if (now >= until) { clearInterval(timer); return; }
    const target = Math.floor(((now - t0) / 1000) * A.rate);
    for (; due < target; due++) {
      let sent = false;
      for (let k = 0; k < strangers.length && !sent; k++) {
        sent = strangers[(next + k) % strangers.length].send();
        if (sent) next = (next + k + 1) % strangers.length;
      }
      if (!sent) skipped++;  // all busy: the server is behind, the rate not kept
    }
  }, 1);
}

setTimeout(() => {
  for (const s of strangers) s.sock.destroy();
  const total = Object.values(counts).reduce((a, b) => a + b, 0);
  console.log(JSON.stringify({
    phase: 'strangers', credentials: A.credentials, connections: A.connections, addresses: A.addresses,
    rate: A.rate || 'unpaced', seconds: A.hold, answers: total, per_second: Math.round(total / A.hold),
    by_status: counts, not_sent_all_busy: skipped,
  }));
  process.exit(0);
}, A.hold * 1000 + 200);
