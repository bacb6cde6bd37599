#!/usr/bin/env node
// Signs webhook test requests with each provider's OFFICIAL npm SDK, so the
// Rust verifiers are tested against the providers' own code, not only ours.
//
//   node sign.mjs < requests.json > signed.json       (run ./setup.sh first)
//
// stdin:  JSON array of
//   {"provider": "standard|stripe|github|twilio|discord", "secret": "...",
//    "body": "<raw body>", "timestamp": <unix seconds>, "id": "<event id>",
//    "url": "<full URL, twilio>", "params": {<form params, twilio>}}
// stdout: JSON array, same order, of
//   {"provider": ..., "headers": {name: value}, "body": "<exact raw body to send>",
//    "url": "<twilio only: the exact URL that was signed; POST there>",
//    "public_key": "<discord only: hex Ed25519 public key>"}
// Any error: a message on stderr, nothing on stdout, exit code 1.
// Slack (and the PyPI Standard Webhooks SDK) are in sign.py.

import { createPrivateKey, createPublicKey, randomBytes, randomUUID, sign as edSign } from "node:crypto";
import { fail, serve, str, timestamp } from "./input.mjs";


const signers = {
  // npm standardwebhooks: new Webhook(secret).sign(msgId, Date, payload) -> "v1,<base64>".
  // The secret is "whsec_" + base64 (the prefix is optional); sign() takes a
  // Date and floors it to seconds.
  async standard(item) {
    const { Webhook } = await import("standardwebhooks");
    const secret = str(item, "secret");
    const body = str(item, "body", { nonEmpty: false });
    const ts = timestamp(item);
    const id = str(item, "id", { required: false }) ?? `msg_${randomBytes(12).toString("hex")}`;
    const signature = new Webhook(secret).sign(id, new Date(ts * 1000), body);
    return {
      headers: { "webhook-id": id, "webhook-timestamp": String(ts), "webhook-signature": signature },
      body,
    };
  },

  // npm stripe: stripe.webhooks.generateTestHeaderString({payload, secret, timestamp})
  // -> "t=<ts>,v1=<hex>". The HMAC key is the whole "whsec_..." string as UTF-8.
  async stripe(item) {
    const { default: Stripe } = await import("stripe");
    const secret = str(item, "secret");
    const body = str(item, "body");
    const ts = timestamp(item);
    const stripe = new Stripe("sk_test_replaysafe_offline_signer_only");
    const header = stripe.webhooks.generateTestHeaderString({ payload: body, secret, timestamp: ts });
    // The SDK silently falls back to "now" for a falsy timestamp: make sure it used ours.
    if (!header.startsWith(`t=${ts},v1=`)) fail(`stripe SDK produced an unexpected header ${header}`);
    return { headers: { "Stripe-Signature": header }, body };
  },

  // npm @octokit/webhooks-methods: async sign(secret, payload) -> "sha256=<hex>".
  async github(item) {
    const { sign, verify } = await import("@octokit/webhooks-methods");
    const secret = str(item, "secret");
    const body = str(item, "body"); // the SDK refuses an empty payload
    const id = str(item, "id", { required: false }) ?? randomUUID();
    const signature = await sign(secret, body);
    if (!(await verify(secret, body, signature))) fail("octokit verify() rejected its own signature");
    return { headers: { "X-Hub-Signature-256": signature, "X-GitHub-Delivery": id }, body };
  },

  // npm twilio: getExpectedTwilioSignature(authToken, url, params) -> base64 HMAC-SHA1.
  //  - "params" given: a form POST; body = params form-encoded, URL signed as given.
  //  - "params" absent: a JSON (or other raw) body; bodySHA256=<hex sha256 of body>
  //    is appended to the URL, which is signed with empty params.
  // Either way the SDK's own validator checks the result before it is emitted.
  async twilio(item) {
    const { default: twilio } = await import("twilio");
    const token = str(item, "secret");
    let url = str(item, "url");
    if (!/^https?:\/\//i.test(url)) fail(`"url" must be a full http(s) URL, got ${JSON.stringify(url)}`);
    const headers = {};
    let body;
    let signature;
    if (item.params !== undefined && item.params !== null) {
      const params = item.params;
      if (typeof params !== "object" || Array.isArray(params)) fail(`"params" must be an object`);
      if (item.body !== undefined && item.body !== null && item.body !== "")
        fail(`give either "params" (form body) or "body" (JSON body), not both`);
      const form = new URLSearchParams();
      for (const [k, v] of Object.entries(params)) {
        for (const one of Array.isArray(v) ? v : [v]) {
          if (typeof one !== "string") fail(`twilio param ${k} must be a string (or array of strings)`);
          form.append(k, one);
        }
      }
      body = form.toString();
      signature = twilio.getExpectedTwilioSignature(token, url, params);
      if (!twilio.validateRequest(token, signature, url, params)) fail("twilio validateRequest() rejected its own signature");
      headers["Content-Type"] = "application/x-www-form-urlencoded";
    } else {
      body = str(item, "body");
      if (/[?&]bodySHA256=/.test(url)) fail(`"url" already has bodySHA256; give the URL without it`);
      url += (url.includes("?") ? "&" : "?") + "bodySHA256=" + twilio.getExpectedBodyHash(body);
      signature = twilio.getExpectedTwilioSignature(token, url, {});
      if (!twilio.validateRequestWithBody(token, signature, url, body))
        fail("twilio validateRequestWithBody() rejected its own signature");
      headers["Content-Type"] = "application/json";
    }
    headers["X-Twilio-Signature"] = signature;
    const id = str(item, "id", { required: false });
    if (id !== undefined) headers["I-Twilio-Idempotency-Token"] = id;
    return { headers, body, url };
  },

  // discord-interactions has no signer: sign timestamp+body with Node's Ed25519
  // (key from the 32-byte seed in "secret", 64 hex chars), then the SDK's
  // verifyKey(body, signature, timestamp, publicKeyHex) must accept it.
  async discord(item) {
    const { verifyKey } = await import("discord-interactions");
    const seedHex = str(item, "secret");
    if (!/^[0-9a-fA-F]{64}$/.test(seedHex)) fail(`discord "secret" must be a 32-byte Ed25519 seed as 64 hex chars`);
    const body = str(item, "body");
    const ts = String(timestamp(item));
    const pkcs8 = Buffer.concat([Buffer.from("302e020100300506032b657004220420", "hex"), Buffer.from(seedHex, "hex")]);
    const privateKey = createPrivateKey({ key: pkcs8, format: "der", type: "pkcs8" });
    const publicKey = createPublicKey(privateKey).export({ format: "der", type: "spki" }).subarray(-32).toString("hex");
    const signature = edSign(null, Buffer.from(ts + body, "utf8"), privateKey).toString("hex");
    if ((await verifyKey(body, signature, ts, publicKey)) !== true)
      fail("discord-interactions verifyKey() rejected the signature");
    return {
      headers: { "X-Signature-Ed25519": signature, "X-Signature-Timestamp": ts },
      body,
      public_key: publicKey,
    };
  },
};

serve(
  "sign.mjs",
  (item) => (typeof item.provider === "string" ? item.provider : ""),
  async (item) => {
    const signer = Object.hasOwn(signers, item.provider) ? signers[item.provider] : undefined;
    if (!signer)
      fail(`unknown provider ${JSON.stringify(item.provider)}; sign.mjs does: ${Object.keys(signers).join(", ")} (slack: sign.py)`);
    return { provider: item.provider, ...(await signer(item)) };
  },
);
