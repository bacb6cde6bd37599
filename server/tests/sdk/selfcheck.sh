#!/usr/bin/env bash
# Self-check of the SDK signers (sign.mjs, sign.py):
#  1. the SDK output reproduces every published vector of shared/vectors.md
#     (Standard Webhooks npm + PyPI, GitHub x2, Slack, Twilio form) plus the
#     Twilio JSON-body vector of Twilio's own helper-library tests;
#  2. sample requests for every provider, re-verified by an independent
#     stdlib-only implementation of spec.md section 3 (and Node's crypto for
#     Ed25519), with wrong-signature controls;
#  3. npm and PyPI Standard Webhooks SDKs agree; errors exit non-zero.
# Exits non-zero on any mismatch. Ends with "N passed, N failed".
set -euo pipefail
DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
"$DIR/setup.sh"
cd "$DIR"
exec python3 - <<'PY'
import base64, hashlib, hmac, json, os, subprocess, sys
from urllib.parse import parse_qsl

passed = failed = 0

def check(name, ok, detail=""):
    global passed, failed
    if ok:
        passed += 1
        print(f"ok    {name}")
    else:
        failed += 1
        print(f"FAIL  {name} {detail}")

def run(script, items, env=None, expect_ok=True):
    cmd = ["node", "sign.mjs"] if script == "mjs" else ["python3", "sign.py"]
    p = subprocess.run(cmd, input=json.dumps(items).encode(), capture_output=True,
                       env={**os.environ, **(env or {})})
    if not expect_ok:
        return p
    if p.returncode != 0 or p.stdout.strip() == b"":
        print(p.stderr.decode(), file=sys.stderr)
        raise SystemExit(f"selfcheck: {' '.join(cmd)} failed (exit {p.returncode})")
    out = json.loads(p.stdout)
    assert len(out) == len(items), "output length differs from input length"
    return out

def hdr(o, name):
    for k, v in o["headers"].items():
        if k.lower() == name.lower():
            return v
    return None

# ---------------------------------------------------------------- 1. vectors
SW = {"provider": "standard", "secret": "whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD",
      "id": "msg_27UH4WbU6Z5A5EzD8u03UvzRbpk", "timestamp": 1649367553,
      "body": '{"email":"test@example.com","username":"test_user"}'}
SW_SIG = "v1,tZ1I4/hDygAJgO5TYxiSd6Sd0kDW6hPenDe+bTa3Kkw="
SLACK = {"provider": "slack", "secret": "8f742231b10e8888abcd99yyyzzz85a5", "timestamp": 1531420618,
         "body": "token=xyzz0WbapA4vBCDEFasx0q6G&team_id=T1DC2JH3J&team_domain=testteamnow&channel_id=G8PSS9T3V"
                 "&channel_name=foobar&user_id=U2CERLKJA&user_name=roadrunner&command=%2Fwebhook-collect&text="
                 "&response_url=https%3A%2F%2Fhooks.slack.com%2Fcommands%2FT1DC2JH3J%2F397700885554%2F96rGlfmibIGlgcZRskXaIFfN"
                 "&trigger_id=398738663015.47445629121.803a0bc887a14d10d2c447fce8b6703c"}
TW_URL = "https://mycompany.com/myapp.php?foo=1&bar=2"
TW_PARAMS = {"CallSid": "CA1234567890ABCDE", "Caller": "+14158675310", "Digits": "1234",
             "From": "+14158675310", "To": "+18005551212"}
TW_JSON = '{"property": "value", "boolean": true}'

v = run("mjs", [
    SW,
    {"provider": "github", "secret": "It's a Secret to Everybody", "body": "Hello, World!", "id": "d-1"},
    {"provider": "github", "secret": "mysecret", "body": '{"foo":"bar"}', "id": "d-2"},
    {"provider": "twilio", "secret": "12345", "url": TW_URL, "params": TW_PARAMS},
    {"provider": "twilio", "secret": "12345", "url": TW_URL, "body": TW_JSON},
])
check("vector standard (npm standardwebhooks)", hdr(v[0], "webhook-signature") == SW_SIG, v[0])
check("vector github docs (@octokit/webhooks-methods)",
      hdr(v[1], "X-Hub-Signature-256") == "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17", v[1])
check("vector github octokit fixture",
      hdr(v[2], "X-Hub-Signature-256") == "sha256=4864d2759938a15468b5df9ade20bf161da9b4f737ea61794142f3484236bda3", v[2])
check("vector twilio form (npm twilio)", hdr(v[3], "X-Twilio-Signature") == "GvWf1cFY/Q7PnoempGyD5oXAezc=", v[3])
check("vector twilio form: signed URL is the URL given", v[3]["url"] == TW_URL, v[3])
check("vector twilio form: body decodes to the params",
      dict(parse_qsl(v[3]["body"], keep_blank_values=True)) == TW_PARAMS, v[3]["body"])
check("vector twilio JSON body (twilio libraries' test)",
      hdr(v[4], "X-Twilio-Signature") == "a9nBmqA0ju/hNViExpshrM61xv4="
      and v[4]["url"] == TW_URL + "&bodySHA256=0a1ff7634d9ab3b95db5c9a2dfe9416e41502b283a80c7cf19632632f96e6620"
      and v[4]["body"] == TW_JSON, v[4])

for tz in ["UTC", "America/New_York", "Asia/Kolkata"]:
    p = run("py", [SLACK, SW], env={"TZ": tz})
    check(f"vector slack (PyPI slack_sdk) TZ={tz}",
          hdr(p[0], "X-Slack-Signature") == "v0=a2114d57b48eac39b9ad189dd8316235a7b4a8d21a10bd27519666489c69b503"
          and hdr(p[0], "X-Slack-Request-Timestamp") == "1531420618", p[0])
    check(f"vector standard (PyPI standardwebhooks) TZ={tz}", hdr(p[1], "webhook-signature") == SW_SIG, p[1])

# ----------------------------------------------- 2. samples, independent check
def b64(b): return base64.b64encode(b).decode()
def hm(key, msg, alg=hashlib.sha256): return hmac.new(key, msg.encode(), alg)

def ref_standard(o, secret):
    key = base64.b64decode(secret.removeprefix("whsec_"), validate=True)
    msg = f'{hdr(o, "webhook-id")}.{hdr(o, "webhook-timestamp")}.{o["body"]}'
    return hdr(o, "webhook-signature") == "v1," + b64(hm(key, msg).digest())

def ref_stripe(o, secret, ts):
    return hdr(o, "Stripe-Signature") == f"t={ts},v1=" + hm(secret.encode(), f'{ts}.{o["body"]}').hexdigest()

def ref_github(o, secret):
    return hdr(o, "X-Hub-Signature-256") == "sha256=" + hm(secret.encode(), o["body"]).hexdigest()

def ref_slack(o, secret):
    ts = hdr(o, "X-Slack-Request-Timestamp")
    return hdr(o, "X-Slack-Signature") == "v0=" + hm(secret.encode(), f'v0:{ts}:{o["body"]}').hexdigest()

def ref_twilio(o, token):
    if "bodySHA256=" in o["url"]:
        ok_hash = o["url"].endswith("bodySHA256=" + hashlib.sha256(o["body"].encode()).hexdigest())
        data = o["url"]
    else:
        ok_hash = True
        pairs = sorted(parse_qsl(o["body"], keep_blank_values=True))
        data = o["url"] + "".join(k + val for k, val in pairs)
    return ok_hash and hdr(o, "X-Twilio-Signature") == b64(hm(token.encode(), data, hashlib.sha1).digest())

WH = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
UNI = '{"id":"evt_1","text":"caf\u00e9 \u2603 \U0001F600 \\"q\\" \\n","n":1}\n'
SEED = "9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60"  # RFC 8032 test 1
samples = [
    {"provider": "standard", "secret": WH, "id": "msg_sample", "timestamp": 1700000000, "body": UNI},
    {"provider": "stripe", "secret": "whsec_test_c2VjcmV0", "timestamp": 1700000001, "body": UNI},
    {"provider": "stripe", "secret": "whsec_test_c2VjcmV0", "timestamp": "1700000002", "body": '{"id":"evt_2"}'},
    {"provider": "github", "secret": "gh s\u00e9cret", "id": "guid-1", "body": UNI},
    {"provider": "twilio", "secret": "tok", "url": "https://example.com:8443/hooks/twilio?x=a%20b&y=",
     "id": "idem-7", "params": {"Body": "hi there + & = caf\u00e9 \U0001F600", "From": "+15005550006",
                                "Empty": "", "AccountSid": "AC123"}},
    {"provider": "twilio", "secret": "tok", "url": "https://example.com/hooks/twilio", "body": UNI},
    {"provider": "discord", "secret": SEED, "timestamp": 1700000003, "body": '{"type":1,"id":"1234"}'},
]
s = run("mjs", samples)
check("sample standard (npm) == reference", ref_standard(s[0], WH), s[0])
check("sample stripe, key = whole whsec_ string", ref_stripe(s[1], "whsec_test_c2VjcmV0", 1700000001), s[1])
check("sample stripe, timestamp given as string", ref_stripe(s[2], "whsec_test_c2VjcmV0", 1700000002), s[2])
check("sample github == reference", ref_github(s[3], "gh s\u00e9cret") and hdr(s[3], "X-GitHub-Delivery") == "guid-1", s[3])
check("sample twilio form (port, encoded query, + & = unicode) == reference",
      ref_twilio(s[4], "tok") and s[4]["url"] == samples[4]["url"]
      and dict(parse_qsl(s[4]["body"], keep_blank_values=True)) == samples[4]["params"]
      and hdr(s[4], "I-Twilio-Idempotency-Token") == "idem-7", s[4])
check("sample twilio JSON (bodySHA256) == reference",
      ref_twilio(s[5], "tok") and s[5]["url"].startswith("https://example.com/hooks/twilio?bodySHA256="), s[5])
check("bodies passed through byte for byte",
      all(s[i]["body"] == samples[i]["body"] for i in (0, 1, 2, 3, 5, 6)))
for i, o in enumerate(s):
    check(f"sample {i} ({o['provider']}) provider echoed", o["provider"] == samples[i]["provider"])
# wrong-signature controls: the reference must reject another secret
check("control: reference rejects wrong github secret", not ref_github(s[3], "other"))
check("control: reference rejects wrong stripe secret", not ref_stripe(s[1], "whsec_other", 1700000001))
check("control: reference rejects wrong twilio token", not ref_twilio(s[4], "other"))

d = s[6]
check("discord public key from seed (RFC 8032 test 1)",
      d["public_key"] == "d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a", d)
NODE_ED = r'''
import { createPublicKey, verify } from "node:crypto";
import { verifyKey } from "discord-interactions";
const d = JSON.parse(process.argv[1]);
const spki = Buffer.concat([Buffer.from("302a300506032b6570032100", "hex"), Buffer.from(d.public_key, "hex")]);
const pub = createPublicKey({ key: spki, format: "der", type: "spki" });
const sig = Buffer.from(d.headers["X-Signature-Ed25519"], "hex"), ts = d.headers["X-Signature-Timestamp"];
const flipped = Buffer.from(sig); flipped[0] ^= 1;
console.log(JSON.stringify([
  verify(null, Buffer.from(ts + d.body), pub, sig),
  await verifyKey(d.body, sig.toString("hex"), ts, d.public_key),
  await verifyKey(d.body + " ", sig.toString("hex"), ts, d.public_key),
  await verifyKey(d.body, flipped.toString("hex"), ts, d.public_key),
  await verifyKey(d.body, sig.toString("hex"), String(Number(ts) + 1), d.public_key),
]));
'''
r = json.loads(subprocess.run(["node", "--input-type=module", "-e", NODE_ED, json.dumps(d)],
                              capture_output=True, check=True).stdout)
check("discord: node crypto.verify(timestamp+body) accepts", r[0] is True, r)
check("discord: verifyKey accepts", r[1] is True, r)
check("discord: verifyKey rejects tampered body / signature / timestamp", r[2:] == [False, False, False], r)

p = run("py", [{"provider": "slack", "secret": "slack-s\u00e9cret", "timestamp": 1700000004, "body": UNI}])
check("sample slack (PyPI) == reference", ref_slack(p[0], "slack-s\u00e9cret") and p[0]["body"] == UNI, p[0])

# ------------------------------------------ 3. npm vs PyPI, defaults, errors
items = [{"provider": "standard", "secret": WH, "id": f"msg_{i}", "timestamp": 1700000000 + i, "body": b}
         for i, b in enumerate(["", "x", UNI, '{"a":[1,2,3]}'])]
a, b = run("mjs", items), run("py", items)
check("standard: npm and PyPI SDKs agree", a == b, (a, b))
check("standard: reference agrees", all(ref_standard(o, WH) for o in a))

dflt = run("mjs", [{"provider": "standard", "secret": WH, "body": "{}"},
                   {"provider": "github", "secret": "s", "body": "{}"}])
check("defaults: id and timestamp filled in and signed",
      ref_standard(dflt[0], WH) and hdr(dflt[0], "webhook-id").startswith("msg_")
      and abs(int(hdr(dflt[0], "webhook-timestamp")) - __import__("time").time()) < 60
      and hdr(dflt[1], "X-GitHub-Delivery"))

bad = [
    ("mjs", [{"provider": "slack", "secret": "s", "body": "b"}]),
    ("py", [{"provider": "stripe", "secret": "s", "body": "b"}]),
    ("mjs", [{"provider": "discord", "secret": "not-hex", "body": "b"}]),
    ("mjs", [{"provider": "stripe", "secret": "s", "body": "b", "timestamp": 1700000000000}]),
    ("py", [{"provider": "slack", "secret": "s", "body": "b", "timestamp": -5}]),
    ("mjs", [{"provider": "twilio", "secret": "t", "url": "/relative", "params": {}}]),
    ("mjs", {"provider": "github"}),
]
for script, items in bad:
    p = run(script, items, expect_ok=False)
    check(f"error exits non-zero, no stdout: {script} {json.dumps(items)[:60]}",
          p.returncode != 0 and p.stdout == b"" and p.stderr.strip() != b"", p.stderr)

print(f"sdk selfcheck: {passed} passed, {failed} failed")
sys.exit(1 if failed else 0)
PY
