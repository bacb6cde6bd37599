#!/usr/bin/env bash
# Self-check of presets.mjs (the official-SDK cross-check of the presets):
#  1. published vectors (Square, Svix, SendGrid, HubSpot v3) are accepted by the
#     providers' own SDKs, and rejected with one body byte changed;
#  2. where an SDK checks the timestamp against the clock (Svix, HubSpot v3) the
#     stale published vector is rejected as such, the vector's formula is
#     reproduced by a stdlib-only reference, and a fresh signature made at "now"
#     with that reference is accepted (Paddle and Linear likewise: fresh only);
#  3. the signers (op "sign": svix SDK, sendgrid via node crypto) reproduce the
#     Svix vector / are accepted by the SDKs; wrong secrets and stale or missing
#     headers are rejected; input errors exit 1 with nothing on stdout.
# Exits non-zero on any mismatch. Ends with "N passed, N failed".
set -euo pipefail
DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
"$DIR/setup.sh"
cd "$DIR"
exec python3 - <<'PY'
import base64, hashlib, hmac, json, subprocess, sys, time

passed = failed = 0

def check(name, ok, detail=""):
    global passed, failed
    if ok:
        passed += 1
        print(f"ok    {name}")
    else:
        failed += 1
        print(f"FAIL  {name} {detail}")

def run(items, expect_ok=True):
    p = subprocess.run(["node", "presets.mjs"], input=json.dumps(items).encode(), capture_output=True)
    if not expect_ok:
        return p
    if p.returncode != 0 or p.stdout.strip() == b"":
        print(p.stderr.decode(), file=sys.stderr)
        raise SystemExit(f"presets-selfcheck: node presets.mjs failed (exit {p.returncode})")
    out = json.loads(p.stdout)
    assert len(out) == len(items), "output length differs from input length"
    return out

def tamper(body):
    """The same body with one byte changed (an alphanumeric byte near the middle)."""
    k = next((i for i in range(len(body) // 2, len(body)) if body[i].isalnum()), len(body) // 2)
    return body[:k] + chr(ord(body[k]) ^ 1) + body[k + 1:]

def hm(key, msg):
    return hmac.new(key if isinstance(key, bytes) else key.encode(), msg.encode(), hashlib.sha256)

def b64(b):
    return base64.b64encode(b).decode()

def pair(name, req, expect_valid=True):
    """req as given, then with one body byte changed: expect valid, then invalid."""
    bad = {**req, "body": tamper(req["body"])}
    assert bad["body"] != req["body"] and len(bad["body"]) == len(req["body"])
    a, b = run([req, bad])
    check(f"{name}: accepted", a == {"valid": expect_valid}, a)
    check(f"{name}: one body byte changed -> rejected", b == {"valid": False}, b)

def now():
    """Read the clock at each use: Paddle allows only 5 s between signing and verifying."""
    return int(time.time())

# ------------------------------------------------------------- 1. vectors
SQ_URL = "https://webhook.site/679a4f3a-dcfa-49ee-bac5-9d0edad886b9"
SQ_KEY = "Ibxx_5AKakO-3qeNVR61Dw"
SQ_BODY = ('{"merchant_id":"MLEFBHHSJGVHD","type":"webhooks.test_notification","event_id":"ac3ac95b-f97d-458c-a6e6-18981597e05f",'
           '"created_at":"2022-07-13T20:30:59.037339943Z","data":{"type":"webhooks","id":"bc368e64-01aa-407e-b46e-3231809b1129"}}')
SQ_SIG = "GF4YkrJgGBDZ9NIYbNXBnMzqb2HoL4RW/S6vkZ9/2N4="
SQ = {"op": "verify", "provider": "square", "secret": SQ_KEY, "url": SQ_URL, "body": SQ_BODY,
      "headers": {"x-square-hmacsha256-signature": SQ_SIG}}
pair("vector square (square WebhooksHelper.verifySignature)", SQ)
r = run([{**SQ, "url": SQ_URL + "/"}, {**SQ, "secret": SQ_KEY[:-1] + "x"}, {**SQ, "headers": {}}])
check("square: other notification URL / other key / no header -> rejected", r == [{"valid": False}] * 3, r)

SG_KEY = ("MFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAE83T4O/n84iotIvIW4mdBgQ/7dAfSmpqIM8kF9mN1flpVKS3GRqe62gw+"
          "2fNNRaINXvVpiglSI8eNEc6wEA3F+g==")
SG_TS = "1600112502"
SG_SIG = "MEUCIGHQVtGj+Y3LkG9fLcxf3qfI10QysgDWmMOVmxG0u6ZUAiEAyBiXDWzM+uOe5W0JuG+luQAbPIqHh89M15TluLtEZtM="
SG_BODY = ('[{"email":"hello@world.com","event":"dropped","reason":"Bounced Address",'
           '"sg_event_id":"ZHJvcC0xMDk5NDkxOS1MUnpYbF9OSFN0T0doUTRrb2ZTbV9BLTA",'
           '"sg_message_id":"LRzXl_NHStOGhQ4kofSm_A.filterdrecv-p3mdw1-756b745b58-kmzbl-18-5F5FC76C-9.0",'
           '"smtp-id":"<LRzXl_NHStOGhQ4kofSm_A@ismtpd0039p1iad1.sendgrid.net>","timestamp":1600112492}]\r\n')
SG = {"op": "verify", "provider": "sendgrid", "public_key": SG_KEY, "body": SG_BODY,
      "headers": {"x-twilio-email-event-webhook-signature": SG_SIG, "x-twilio-email-event-webhook-timestamp": SG_TS}}
pair("vector sendgrid (@sendgrid/eventwebhook verifySignature, body ends in CRLF)", SG)
r = run([{**SG, "body": SG_BODY[:-2]},
         {**SG, "headers": {**SG["headers"], "x-twilio-email-event-webhook-timestamp": "1600112503"}},
         {**SG, "headers": {"x-twilio-email-event-webhook-timestamp": SG_TS}}])
check("sendgrid: body without its CRLF / other timestamp / no signature -> rejected", r == [{"valid": False}] * 3, r)

# ------------------------------------------- 2. clock-checked SDKs, fresh values
SVIX_SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
SVIX_ID, SVIX_TS, SVIX_BODY = "msg_p5jXN8AQM9LWM0D4loKWxJek", 1614265330, '{"test": 2432232314}'
SVIX_SIG = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="

def svix_ref(secret, msg_id, ts, body):
    key = base64.b64decode(secret.removeprefix("whsec_"))
    return "v1," + b64(hm(key, f"{msg_id}.{ts}.{body}").digest())

def svix_req(provider, msg_id, ts, sig, body=SVIX_BODY, secret=SVIX_SECRET):
    return {"op": "verify", "provider": provider, "secret": secret, "body": body,
            "headers": {"svix-id": msg_id, "svix-timestamp": str(ts), "svix-signature": sig}}

check("vector svix: the reference reproduces it", svix_ref(SVIX_SECRET, SVIX_ID, SVIX_TS, SVIX_BODY) == SVIX_SIG)
s = run([{"op": "sign", "provider": "svix", "secret": SVIX_SECRET, "id": SVIX_ID, "timestamp": SVIX_TS, "body": SVIX_BODY}])[0]
check("vector svix: op sign (svix Webhook.sign) reproduces it",
      s == {"headers": {"svix-id": SVIX_ID, "svix-timestamp": str(SVIX_TS), "svix-signature": SVIX_SIG}, "body": SVIX_BODY}, s)
r = run([svix_req("svix", SVIX_ID, SVIX_TS, SVIX_SIG)])
check("vector svix as published (2021): rejected by the SDK's 5-minute clock window", r == [{"valid": False}], r)
for provider in ["svix", "clerk", "resend"]:
    t = now()
    pair(f"svix fresh (reference-signed at now) via {provider}",
         svix_req(provider, SVIX_ID, t, svix_ref(SVIX_SECRET, SVIX_ID, t, SVIX_BODY)))
fresh = run([{"op": "sign", "provider": "svix", "secret": SVIX_SECRET, "id": "msg_fresh", "body": SVIX_BODY}])[0]
check("svix op sign, defaults: timestamp = now", abs(int(fresh["headers"]["svix-timestamp"]) - now()) < 60, fresh)
pair("svix op sign at now -> svix verify", {"op": "verify", "provider": "svix", "secret": SVIX_SECRET,
                                             "headers": fresh["headers"], "body": fresh["body"]})
t = now()
ok_sig = svix_ref(SVIX_SECRET, SVIX_ID, t, SVIX_BODY)
r = run([svix_req("svix", SVIX_ID, t - 400, svix_ref(SVIX_SECRET, SVIX_ID, t - 400, SVIX_BODY)),
         svix_req("svix", SVIX_ID, t + 400, svix_ref(SVIX_SECRET, SVIX_ID, t + 400, SVIX_BODY)),
         svix_req("svix", SVIX_ID, t - 200, svix_ref(SVIX_SECRET, SVIX_ID, t - 200, SVIX_BODY)),
         svix_req("svix", SVIX_ID, t, "v1,bogus " + ok_sig),
         svix_req("clerk", SVIX_ID, t, ok_sig, secret="whsec_" + b64(b"another secret")),
         svix_req("resend", "msg_other", t, ok_sig),
         svix_req("svix", SVIX_ID, t, svix_ref(SVIX_SECRET, SVIX_ID, t, "not json"), body="not json")])
check("svix: -400 s / +400 s rejected, -200 s accepted, several signatures accepted",
      r[:4] == [{"valid": False}, {"valid": False}, {"valid": True}, {"valid": True}], r)
check("svix: other secret / other msg id rejected", r[4:6] == [{"valid": False}] * 2, r)
check("svix 1.x quirk: a correctly signed NON-JSON body is rejected (verify JSON.parses it)", r[6] == {"valid": False}, r)

HS_SECRET = "yyyyyyyy-yyyy-yyyy-yyyy-yyyyyyyyyyyy"
HS_URL, HS_BODY, HS_TS = "https://www.example.com/webhook_uri", "{'example_field':'example_value'}", "15000000"
HS_SIG = "HPW73RUtKmcYoEDADG0s6MmGFWUzWJKAW07r8RDgcQw="

def hs_ref(secret, url, body, ts, method="POST"):
    return b64(hm(secret, method + url + body + ts).digest())

def hs_req(ts, sig, body=HS_BODY, url=HS_URL, secret=HS_SECRET):
    return {"op": "verify", "provider": "hubspot", "secret": secret, "url": url, "body": body,
            "headers": {"x-hubspot-signature-v3": sig, "x-hubspot-request-timestamp": ts}}

check("vector hubspot v3: the reference (base64 HMAC-SHA256 of method+url+body+timestamp) reproduces it",
      hs_ref(HS_SECRET, HS_URL, HS_BODY, HS_TS) == HS_SIG)
r = run([hs_req(HS_TS, HS_SIG)])
check("vector hubspot v3 as published (timestamp 15000000 ms): rejected by the SDK's 5-minute clock check", r == [{"valid": False}], r)
ms = str(now() * 1000)
pair("hubspot v3 fresh (reference-signed at now, ms) (@hubspot/api-client Signature.isValid)", hs_req(ms, hs_ref(HS_SECRET, HS_URL, HS_BODY, ms)))
t = now()
old, future = str((t - 400) * 1000), str((t + 3600) * 1000)
r = run([hs_req(old, hs_ref(HS_SECRET, HS_URL, HS_BODY, old)),
         hs_req(future, hs_ref(HS_SECRET, HS_URL, HS_BODY, future)),
         hs_req(ms, hs_ref(HS_SECRET, HS_URL, HS_BODY, ms), url=HS_URL + "?x=1"),
         hs_req(ms, hs_ref("other", HS_URL, HS_BODY, ms)),
         {**hs_req(ms, ""), "headers": {"x-hubspot-signature-v3": hs_ref(HS_SECRET, HS_URL, HS_BODY, ms)}}])
check("hubspot: 400 s old -> rejected; 1 h in the FUTURE -> accepted (the SDK checks staleness only)",
      r[:2] == [{"valid": False}, {"valid": True}], r)
check("hubspot: other URL / other secret / no timestamp header -> rejected", r[2:] == [{"valid": False}] * 3, r)

PD_SECRET = "pdl_ntfset_01h8bkrq3a3z8x9d0z6s6r0m7r_replaysafe"
PD_BODY = ('{"event_id":"evt_01h8bx5k9k7y3n0f4v2c1d6e8a","event_type":"transaction.completed",'
           '"occurred_at":"2024-01-01T00:00:00.000000Z","notification_id":"ntf_01h8bx5kb3m2t0q9r7s6p5n4m3","data":{"id":"txn_1"}}')

def pd_req(ts, body=PD_BODY, secret=PD_SECRET, sign_body=None, sign_secret=None):
    h1 = hm(sign_secret or secret, f"{ts}:{sign_body if sign_body is not None else body}").hexdigest()
    return {"op": "verify", "provider": "paddle", "secret": secret, "body": body,
            "headers": {"paddle-signature": f"ts={ts};h1={h1}"}}

pair("paddle fresh (ts=now;h1=hex HMAC of ts:body) (@paddle/paddle-node-sdk isSignatureValid)", pd_req(now()))
t = now()
r = run([pd_req(t - 10), pd_req(t + 3600), pd_req(t, sign_secret="other"),
         {**pd_req(t), "headers": {}}, {**pd_req(t), "headers": {"paddle-signature": "garbage"}}])
check("paddle: 10 s old -> rejected; 1 h in the FUTURE -> accepted (the SDK allows now <= ts + 5 s only)",
      r[:2] == [{"valid": False}, {"valid": True}], r)
check("paddle: other secret / no header / malformed header -> rejected", r[2:] == [{"valid": False}] * 3, r)

LN_SECRET = "lin_wh_replaysafe_selfcheck"

def ln_req(ts_ms, secret=LN_SECRET, sign_secret=None, upper=False):
    body = json.dumps({"action": "create", "type": "Issue", "data": {"id": "issue-1", "title": "caf\u00e9"},
                       "webhookId": "wh-1", "webhookTimestamp": ts_ms}, ensure_ascii=False)
    sig = hm(sign_secret or secret, body).hexdigest()
    return {"op": "verify", "provider": "linear", "secret": secret, "body": body, "timestamp": ts_ms,
            "headers": {"linear-signature": sig.upper() if upper else sig}}

pair("linear fresh (hex HMAC of body, webhookTimestamp=now ms) (@linear/sdk LinearWebhookClient.verify)", ln_req(now() * 1000))
t = now()
stale = ln_req((t - 120) * 1000)
r = run([stale, {**stale, "timestamp": t * 1000}, ln_req((t + 120) * 1000),
         ln_req(t * 1000, sign_secret="other"), ln_req(t * 1000, upper=True)])
check("linear: webhookTimestamp 120 s old / 120 s ahead -> rejected, whatever 'timestamp' says",
      [r[0], r[1], r[2]] == [{"valid": False}] * 3, r)
check("linear: other secret / UPPER-case hex -> rejected", r[3:] == [{"valid": False}] * 2, r)
nots = "{\"action\":\"create\"}"
r = run([{"op": "verify", "provider": "linear", "secret": LN_SECRET, "body": nots, "timestamp": now() * 1000,
          "headers": {"linear-signature": hm(LN_SECRET, nots).hexdigest()}}])
check("linear: body without webhookTimestamp -> rejected even with the right signature", r == [{"valid": False}], r)

# ------------------------------------------------ 3. sendgrid signer, errors
t = now()
items = [{"op": "sign", "provider": "sendgrid", "body": SG_BODY, "timestamp": t},
         {"op": "sign", "provider": "sendgrid", "body": '[{"event":"delivered"}]'},
         {"op": "sign", "provider": "sendgrid", "body": '[{"event":"caf\u00e9 \u2603"}]',
          "secret": "c9afa9d845ba75166b5c215767b1d6934e50c3db36e89b127b8a622b120f6721"}]
g = run(items)
check("sendgrid op sign: headers and body", set(g[0]["headers"]) == {"x-twilio-email-event-webhook-signature",
      "x-twilio-email-event-webhook-timestamp"} and g[0]["headers"]["x-twilio-email-event-webhook-timestamp"] == str(t)
      and g[0]["body"] == SG_BODY, g[0])
check("sendgrid op sign: one fresh key per run when no secret", g[0]["public_key"] == g[1]["public_key"], g)
# RFC 6979 A.2.5 P-256 key: x = 60FED4BA...
check("sendgrid op sign: secret = P-256 scalar -> its public key (RFC 6979 A.2.5)",
      base64.b64decode(g[2]["public_key"])[-64:-32].hex().upper()
      == "60FED4BA255A9D31C961EB74C6356D68C049B8923B61FA6CE669622E60F29FB6", g[2])
for i, o in enumerate(g):
    pair(f"sendgrid op sign #{i} -> sendgrid verify",
         {"op": "verify", "provider": "sendgrid", "public_key": o["public_key"], "headers": o["headers"], "body": o["body"]})
r = run([{"op": "verify", "provider": "sendgrid", "public_key": SG_KEY, "headers": g[0]["headers"], "body": g[0]["body"]}])
check("sendgrid: a signature checked against another public key -> rejected", r == [{"valid": False}], r)

bad = [
    {"op": "verify", "provider": "stripe", "secret": "s", "body": "b"},
    {"op": "frobnicate", "provider": "svix"},
    {"op": "sign", "provider": "square", "secret": "s", "body": "b"},
    {"op": "verify", "provider": "square", "secret": "s", "body": "b", "headers": {}},
    {"op": "verify", "provider": "hubspot", "secret": "s", "body": "b"},
    {"op": "verify", "provider": "sendgrid", "body": "b", "headers": {}},
    {"op": "verify", "provider": "svix", "secret": "s", "body": "b", "headers": {"svix-id": 5}},
    {"op": "sign", "provider": "svix", "secret": SVIX_SECRET, "body": "b", "timestamp": 1700000000000},
    {"op": "sign", "provider": "sendgrid", "secret": "not-hex", "body": "b"},
    {"op": "verify", "provider": "paddle", "secret": "s"},
]
for items in [[b] for b in bad] + [{"op": "verify"}, [SQ, "x"]]:
    p = run(items, expect_ok=False)
    check(f"input error exits 1, no stdout: {json.dumps(items)[:70]}",
          p.returncode == 1 and p.stdout == b"" and p.stderr.strip() != b"", (p.returncode, p.stdout, p.stderr))
p = subprocess.run(["node", "presets.mjs"], input=b"not json", capture_output=True)
check("input error exits 1, no stdout: stdin not JSON", p.returncode == 1 and p.stdout == b"" and p.stderr.strip() != b"")
check("empty array -> empty array", run([]) == [])

print(f"presets selfcheck: {passed} passed, {failed} failed")
sys.exit(1 if failed else 0)
PY
