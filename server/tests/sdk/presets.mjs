#!/usr/bin/env node
// Cross-checks replaysafe's declarative presets against each provider's
// OFFICIAL npm package, offline: the provider's own verify function decides
// whether a request replaysafe accepts (or a request it signs) is genuine.
//
//   node presets.mjs < requests.json > answers.json      (run ./setup.sh first)
//
// stdin:  JSON array of requests, each one of
//   {"op": "verify", "provider": P, "secret": S, "public_key": K,
//    "headers": {name: value}, "body": "<raw body>", "url": U, "timestamp": T}
//      -> {"valid": true|false}
//   {"op": "sign", "provider": "svix"|"sendgrid", "secret": S, "body": "<raw body>",
//    "timestamp": <unix seconds>, "id": "<message id>"}
//      -> {"headers": {lowercase name: value}, "body": "<raw body>",
//          "public_key": "<sendgrid only: base64 SPKI DER of the P-256 key>"}
// stdout: JSON array of answers, same order.
// Any error in the INPUT (bad JSON, unknown op/provider, a missing required
// field): a message on stderr, nothing on stdout, exit code 1. An exception
// thrown by an SDK's verify function is not an error: it is {"valid": false}
// (set PRESETS_DEBUG=1 to see each rejection's reason on stderr).
//
// verify: P and the SDK call that decides (headers are looked up case-insensitively):
//   paddle    @paddle/paddle-node-sdk  new Webhooks().isSignatureValid(body, secret, paddle-signature)
//             (after new Paddle(...) has initialised the SDK's runtime; no network).
//             CLOCK: false once now > ts + 5 s (future ts are accepted).
//   square    square  WebhooksHelper.verifySignature({requestBody: body, signatureHeader:
//             x-square-hmacsha256-signature, signatureKey: secret, notificationUrl: url}).
//             No clock. "url" required.
//   linear    @linear/sdk/webhooks  new LinearWebhookClient(secret).verify(Buffer(body),
//             linear-signature, timestamp). Throws on mismatch. The timestamp argument is
//             ignored by the SDK: it reads the body's numeric "webhookTimestamp" (ms).
//             CLOCK: false unless |now - webhookTimestamp| <= 60 s.
//   hubspot   @hubspot/api-client  Signature.isValid({signatureVersion: "v3", signature:
//             x-hubspot-signature-v3, clientSecret: secret, requestBody: body, url,
//             method: "POST" (or "method"), timestamp: x-hubspot-request-timestamp (ms,
//             passed as the header string)}). "url" required.
//             CLOCK: throws (= false) once now - timestamp > 300 000 ms (future accepted).
//   sendgrid  @sendgrid/eventwebhook  new EventWebhook().verifySignature(
//             convertPublicKeyToECDSA(public_key), body, x-twilio-email-event-webhook-signature,
//             x-twilio-email-event-webhook-timestamp). "public_key" = base64 SPKI DER. No clock.
//   svix, clerk, resend   svix  new Webhook(secret).verify(body, headers) with svix-id,
//             svix-timestamp, svix-signature (webhook-* also accepted by the SDK). Throws on
//             mismatch; svix 1.x also JSON.parses the body, so a non-JSON body is false.
//             CLOCK: false unless |now - svix-timestamp| <= 300 s.
// sign:
//   svix      svix  new Webhook(secret).sign(id, new Date(timestamp * 1000), body)
//             -> svix-id, svix-timestamp, svix-signature.
//   sendgrid  no SDK signer: Node's crypto signs timestamp + body with ECDSA P-256 / SHA-256
//             (DER, base64); the SDK's verifySignature must accept it before it is emitted.
//             "secret": the private scalar as 64 hex chars; absent or "": one fresh key pair
//             per run, shared by every sendgrid sign request of that run.
//             -> x-twilio-email-event-webhook-signature, x-twilio-email-event-webhook-timestamp.
//   "timestamp" (unix seconds) defaults to now, "id" to a random msg_... .

import { createECDH, createPrivateKey, createPublicKey, generateKeyPairSync, randomBytes, sign as cryptoSign } from "node:crypto";
import { fail, serve, str, timestamp } from "./input.mjs";

// Nothing but the answers may reach stdout (an SDK that logs must not corrupt it).
for (const level of ["log", "info", "debug", "warn", "trace"]) console[level] = console.error.bind(console);

const debug = (msg) => {
  if (process.env.PRESETS_DEBUG) process.stderr.write(`presets.mjs: ${msg}\n`);
};


// Case-insensitive header lookup; undefined when absent (the SDK then decides).
function headerMap(item) {
  const h = item.headers ?? {};
  if (typeof h !== "object" || Array.isArray(h)) fail(`"headers" must be an object of name: value`);
  const out = {};
  for (const [k, v] of Object.entries(h)) {
    if (typeof v !== "string") fail(`header ${JSON.stringify(k)} must be a string`);
    out[k.toLowerCase()] = v;
  }
  return out;
}

// ------------------------------------------------------------------ verify
const verifiers = {
  async paddle(item, h) {
    const { Paddle, Webhooks } = await import("@paddle/paddle-node-sdk");
    const secret = str(item, "secret");
    const body = str(item, "body", { nonEmpty: false });
    new Paddle("replaysafe_offline_verifier_only"); // initialises the runtime; no network
    return () => new Webhooks().isSignatureValid(body, secret, h["paddle-signature"]);
  },

  async square(item, h) {
    const m = await import("square");
    const WebhooksHelper = m.WebhooksHelper ?? m.default.WebhooksHelper;
    const secret = str(item, "secret");
    const body = str(item, "body", { nonEmpty: false });
    const url = str(item, "url");
    return () =>
      WebhooksHelper.verifySignature({
        requestBody: body,
        signatureHeader: h["x-square-hmacsha256-signature"],
        signatureKey: secret,
        notificationUrl: url,
      });
  },

  async linear(item, h) {
    const { LinearWebhookClient } = await import("@linear/sdk/webhooks");
    const secret = str(item, "secret");
    const body = str(item, "body", { nonEmpty: false });
    const ts = item.timestamp ?? undefined;
    return () => new LinearWebhookClient(secret).verify(Buffer.from(body, "utf8"), h["linear-signature"], ts);
  },

  async hubspot(item, h) {
    const m = await import("@hubspot/api-client");
    const Signature = m.Signature ?? m.default.Signature;
    const secret = str(item, "secret");
    const body = str(item, "body", { nonEmpty: false });
    const url = str(item, "url");
    const method = str(item, "method", { required: false }) ?? "POST";
    return () =>
      Signature.isValid({
        signature: h["x-hubspot-signature-v3"],
        clientSecret: secret,
        requestBody: body,
        signatureVersion: "v3",
        url,
        method,
        timestamp: h["x-hubspot-request-timestamp"],
      });
  },

  async sendgrid(item, h) {
    const m = await import("@sendgrid/eventwebhook");
    const EventWebhook = m.EventWebhook ?? m.default.EventWebhook;
    const publicKey = str(item, "public_key");
    const body = str(item, "body", { nonEmpty: false });
    return () => {
      const ew = new EventWebhook();
      return ew.verifySignature(
        ew.convertPublicKeyToECDSA(publicKey),
        body,
        h["x-twilio-email-event-webhook-signature"],
        h["x-twilio-email-event-webhook-timestamp"],
      );
    };
  },

  async svix(item, h) {
    const m = await import("svix");
    const Webhook = m.Webhook ?? m.default.Webhook;
    const secret = str(item, "secret");
    const body = str(item, "body", { nonEmpty: false });
    return () => {
      new Webhook(secret).verify(body, h); // svix 1.x: returns the parsed body, throws on failure
      return true;
    };
  },
};
verifiers.clerk = verifiers.svix;
verifiers.resend = verifiers.svix;

async function verify(item) {
  const h = headerMap(item);
  const run = await verifiers[item.provider](item, h);
  let result;
  try {
    result = await run();
  } catch (e) {
    debug(`${item.provider}: the SDK threw: ${e?.message ?? e}`);
    return { valid: false };
  }
  if (result !== true && result !== false) fail(`the ${item.provider} SDK returned ${JSON.stringify(result)}, not a boolean`);
  if (!result) debug(`${item.provider}: the SDK returned false`);
  return { valid: result };
}

// -------------------------------------------------------------------- sign
let sendgridRunKey; // one fresh key pair per run when no "secret" is given

function sendgridKey(item) {
  const scalar = str(item, "secret", { required: false, nonEmpty: false });
  if (scalar === undefined || scalar === "") {
    sendgridRunKey ??= generateKeyPairSync("ec", { namedCurve: "prime256v1" }).privateKey;
    return sendgridRunKey;
  }
  if (!/^[0-9a-fA-F]{64}$/.test(scalar)) fail(`sendgrid "secret" must be a P-256 private scalar as 64 hex chars (or absent)`);
  const ecdh = createECDH("prime256v1");
  try {
    ecdh.setPrivateKey(Buffer.from(scalar, "hex"));
  } catch (e) {
    fail(`sendgrid "secret" is not a valid P-256 private scalar: ${e.message}`);
  }
  const pub = ecdh.getPublicKey(); // 0x04 || x || y
  const b64u = (b) => b.toString("base64url");
  return createPrivateKey({
    format: "jwk",
    key: { kty: "EC", crv: "P-256", d: b64u(Buffer.from(scalar, "hex")), x: b64u(pub.subarray(1, 33)), y: b64u(pub.subarray(33)) },
  });
}

const signers = {
  async svix(item) {
    const m = await import("svix");
    const Webhook = m.Webhook ?? m.default.Webhook;
    const secret = str(item, "secret");
    const body = str(item, "body", { nonEmpty: false });
    const ts = timestamp(item);
    const id = str(item, "id", { required: false }) ?? `msg_${randomBytes(12).toString("hex")}`;
    const signature = new Webhook(secret).sign(id, new Date(ts * 1000), body);
    return { headers: { "svix-id": id, "svix-timestamp": String(ts), "svix-signature": signature }, body };
  },

  async sendgrid(item) {
    const m = await import("@sendgrid/eventwebhook");
    const EventWebhook = m.EventWebhook ?? m.default.EventWebhook;
    const body = str(item, "body", { nonEmpty: false });
    const ts = String(timestamp(item));
    const privateKey = sendgridKey(item);
    const publicKey = createPublicKey(privateKey).export({ format: "der", type: "spki" }).toString("base64");
    const signature = cryptoSign("sha256", Buffer.from(ts + body, "utf8"), privateKey).toString("base64"); // DER
    const ew = new EventWebhook();
    if (ew.verifySignature(ew.convertPublicKeyToECDSA(publicKey), body, signature, ts) !== true)
      fail("@sendgrid/eventwebhook verifySignature() rejected the signature");
    return {
      headers: { "x-twilio-email-event-webhook-signature": signature, "x-twilio-email-event-webhook-timestamp": ts },
      body,
      public_key: publicKey,
    };
  },
};

const ops = {
  verify: { table: verifiers, run: verify },
  sign: { table: signers, run: (item) => signers[item.provider](item) },
};

serve(
  "presets.mjs",
  (item) => (typeof item.op === "string" ? `${item.op} ${item.provider}` : ""),
  async (item) => {
    const op = Object.hasOwn(ops, item.op) ? ops[item.op] : undefined;
    if (!op) fail(`unknown op ${JSON.stringify(item.op)}; presets.mjs does: ${Object.keys(ops).join(", ")}`);
    if (!Object.hasOwn(op.table, item.provider))
      fail(`op ${item.op}: unknown provider ${JSON.stringify(item.provider)}; it does: ${Object.keys(op.table).join(", ")}`);
    return op.run(item);
  },
);
