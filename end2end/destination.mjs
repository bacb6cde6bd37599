// The application replaysafe forwards to in the browser tests: it counts what
// it receives per Idempotency-Key and answers by the key's name: "refuse-once"
// gets 400 the first time only ("refuse-once-currency-BATCH" with the message
// "invalid currency in batch BATCH for order N", N changing every time, so the
// batch makes one incident), "refuse" always 400 (dead letters), "poison"
// always 500 (retried until dead-lettered), "slow" waits 3 s, anything else 200. At /refuse-once every key gets 400 the first
// time; requests there are counted apart, as `/refuse-once {key}`.
import { createServer } from 'node:http';

const port = Number(process.argv[2] ?? 3101);
const received = new Map();

// A stand-in for Stripe's `GET /v1/events` (Bearer sk_test_e2e_reconcile): three
// events created half an hour before it started, newest first, one page.
export const stripeEvents = [1, 2, 3].map((i) => ({
  id: `evt_e2e_recon_${i}`, object: 'event', api_version: '2024-06-20',
  created: Math.floor(Date.now() / 1000) - 1800 - i * 60, type: 'invoice.paid',
  livemode: false, pending_webhooks: 1,
  data: { object: { id: `in_e2e_${i}`, object: 'invoice' } },
}));
function listStripeEvents(req, res) {
  res.setHeader('content-type', 'application/json');
  if (req.headers.authorization !== 'Bearer sk_test_e2e_reconcile') {
    res.statusCode = 401;
    return res.end(JSON.stringify({ error: { type: 'invalid_request_error', message: 'Invalid API Key provided' } }));
  }
  const q = new URL(req.url, 'http://x').searchParams;
  const gte = Number(q.get('created[gte]') ?? 0);
  const lte = Number(q.get('created[lte]') ?? Infinity);
  const data = stripeEvents.filter((e) => e.created >= gte && e.created <= lte);
  res.end(JSON.stringify({ object: 'list', url: '/v1/events', has_more: false, data }));
}
const forced = new Map();

createServer((req, res) => {
  if (req.method === 'GET' && req.url === '/health') return res.end('ok');
  if (req.method === 'GET' && req.url.startsWith('/v1/events')) return listStripeEvents(req, res);
  if (req.method === 'GET' && req.url === '/stripe-events') {
    res.setHeader('content-type', 'application/json');
    return res.end(JSON.stringify(stripeEvents));
  }
  if (req.method === 'GET' && req.url.startsWith('/received/')) {
    const key = decodeURIComponent(req.url.slice('/received/'.length));
    res.setHeader('content-type', 'application/json');
    return res.end(JSON.stringify({ count: received.get(key) ?? 0, forced: forced.get(key) ?? 0 }));
  }
  if (req.method !== 'POST') { res.statusCode = 405; return res.end(); }
  const chunks = [];
  req.on('data', (c) => chunks.push(c));
  req.on('end', () => {
    const key = req.headers['idempotency-key'] ?? '';
    const apart = req.url === '/refuse-once';
    const counted = apart ? `${req.url} ${key}` : key;
    const count = (received.get(counted) ?? 0) + 1;
    received.set(counted, count);
    if (req.headers['x-replaysafe-forced'] === 'true') forced.set(key, (forced.get(key) ?? 0) + 1);
    const answer = () => {
      const refuse = apart || key.includes('refuse-once') ? count === 1 : key.includes('refuse');
      const batch = /currency-([a-z]+)/.exec(key);
      if (refuse && batch) {
        res.statusCode = 400;
        return res.end(`invalid currency in batch ${batch[1]} for order ${1000 + received.size * 7}\nsee the docs`);
      }
      if (refuse) { res.statusCode = 400; return res.end('refused by the e2e destination'); }
      if (key.includes('poison')) { res.statusCode = 500; return res.end('the e2e destination cannot take this one'); }
      res.end('ok');
    };
    if (key.includes('slow')) setTimeout(answer, 3000); else answer();
  });
}).listen(port, '127.0.0.1');
