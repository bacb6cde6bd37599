// Reads a provider API stand-in with the provider's official SDK, so the
// stand-ins answer as the real APIs do (the SDKs parse and page them):
//   node list.mjs stripe BASE_URL API_KEY   -> {"ids": [...]}  (stripe.events.list, auto-paged)
//   node list.mjs github BASE_URL TOKEN OWNER REPO HOOK_ID
//                    -> {"deliveries": [{id, guid, status_code, delivered_at}], "redelivered": status}
//                       (octokit.paginate of repos.listWebhookDeliveries, then
//                        repos.redeliverWebhookDelivery of the newest)
// Any error: message on stderr, exit 1.
import Stripe from 'stripe';
import { Octokit } from '@octokit/rest';

const [provider, base, credential, ...rest] = process.argv.slice(2);
try {
  if (provider === 'stripe') {
    const url = new URL(base);
    const stripe = new Stripe(credential, {
      host: url.hostname, port: Number(url.port), protocol: url.protocol.replace(':', ''),
      maxNetworkRetries: 0,
    });
    const ids = [];
    for await (const event of stripe.events.list({ limit: 100, created: { gte: 0 } })) {
      if (typeof event.id !== 'string' || typeof event.created !== 'number') throw new Error(`not an event: ${JSON.stringify(event)}`);
      ids.push(event.id);
    }
    console.log(JSON.stringify({ ids }));
  } else if (provider === 'github') {
    const [owner, repo, hookId] = rest;
    const octokit = new Octokit({ auth: credential, baseUrl: base, log: { debug() {}, info() {}, warn() {}, error: console.error } });
    const deliveries = await octokit.paginate(octokit.rest.repos.listWebhookDeliveries, {
      owner, repo, hook_id: Number(hookId), per_page: 100,
    });
    const redelivered = await octokit.rest.repos.redeliverWebhookDelivery({
      owner, repo, hook_id: Number(hookId), delivery_id: deliveries[0].id,
    });
    console.log(JSON.stringify({
      deliveries: deliveries.map(({ id, guid, status_code, delivered_at }) => ({ id, guid, status_code, delivered_at })),
      redelivered: redelivered.status,
    }));
  } else {
    throw new Error(`unknown provider ${provider}`);
  }
} catch (e) {
  console.error(e.stack ?? String(e));
  process.exit(1);
}
