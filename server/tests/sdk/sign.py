#!/usr/bin/env python3
"""Signs webhook test requests with the providers' OFFICIAL PyPI SDKs.

    python3 sign.py < requests.json > signed.json     (run ./setup.sh first)

Same contract as sign.mjs, for the providers it does not cover:
  slack     slack_sdk.signature.SignatureVerifier(secret).generate_signature(timestamp=, body=)
  standard  standardwebhooks.Webhook(secret).sign(msg_id, datetime, data)  (PyPI twin of the npm SDK)
stdin:  JSON array of {"provider", "secret", "body", "timestamp" (unix seconds), "id"}
stdout: JSON array, same order, of {"provider", "headers": {name: value}, "body"}
Any error: a message on stderr, nothing on stdout, exit code 1.
Run with any python3: it re-executes itself with ./.venv/bin/python when needed.
"""

import json
import os
import secrets
import sys
import time
from datetime import datetime, timezone

HERE = os.path.dirname(os.path.abspath(__file__))
VENV_PYTHON = os.path.join(HERE, ".venv", "bin", "python")

try:
    import slack_sdk.signature as slack_signature
    import standardwebhooks
except ImportError:
    if os.path.exists(VENV_PYTHON) and os.path.realpath(sys.prefix) != os.path.realpath(os.path.join(HERE, ".venv")):
        os.execv(VENV_PYTHON, [VENV_PYTHON, os.path.abspath(__file__), *sys.argv[1:]])
    sys.stderr.write("sign.py: slack_sdk / standardwebhooks not importable: run setup.sh in this folder first\n")
    sys.exit(1)


class InputError(Exception):
    pass


def string(item, key, required=True, non_empty=True):
    v = item.get(key)
    if v is None:
        if required:
            raise InputError(f'"{key}" is required')
        return None
    if not isinstance(v, str):
        raise InputError(f'"{key}" must be a string')
    if non_empty and v == "":
        raise InputError(f'"{key}" must not be empty')
    return v


def timestamp(item):
    """Unix seconds; absent: now. An integer or a string of digits."""
    v = item.get("timestamp")
    if v is None:
        return int(time.time())
    n = int(v) if isinstance(v, str) and v.isascii() and v.isdigit() else v
    if isinstance(n, bool) or not isinstance(n, int) or n <= 0:
        raise InputError(f'"timestamp" must be a positive integer of unix SECONDS, got {json.dumps(v)}')
    if n > 10**11:
        raise InputError(f'"timestamp" {n} looks like milliseconds; give unix SECONDS')
    return n


class FixedClock(slack_signature.Clock):
    def __init__(self, now):
        self._now = now

    def now(self):
        return float(self._now)


def sign_slack(item):
    secret = string(item, "secret")
    body = string(item, "body", non_empty=False)
    ts = str(timestamp(item))
    signature = slack_signature.SignatureVerifier(secret).generate_signature(timestamp=ts, body=body)
    # The SDK's own verifier, with its clock pinned to the timestamp, must accept it.
    if not slack_signature.SignatureVerifier(secret, clock=FixedClock(ts)).is_valid(body=body, timestamp=ts, signature=signature):
        raise InputError("slack_sdk is_valid() rejected its own signature")
    return {"headers": {"X-Slack-Signature": signature, "X-Slack-Request-Timestamp": ts}, "body": body}


def sign_standard(item):
    secret = string(item, "secret")
    body = string(item, "body", non_empty=False)
    ts = timestamp(item)
    msg_id = string(item, "id", required=False) or f"msg_{secrets.token_hex(12)}"
    # The SDK does timestamp.replace(tzinfo=utc): an aware UTC datetime is a must,
    # a naive local one would shift the signed time by the machine's UTC offset.
    when = datetime.fromtimestamp(ts, tz=timezone.utc)
    signature = standardwebhooks.Webhook(secret).sign(msg_id, when, body)
    return {
        "headers": {"webhook-id": msg_id, "webhook-timestamp": str(ts), "webhook-signature": signature},
        "body": body,
    }


SIGNERS = {"slack": sign_slack, "standard": sign_standard}


def main():
    try:
        data = json.loads(sys.stdin.buffer.read().decode("utf-8"))
    except (ValueError, UnicodeDecodeError) as e:
        raise InputError(f"stdin is not valid JSON: {e}")
    if not isinstance(data, list):
        raise InputError("stdin must be a JSON array of requests")
    out = []
    for i, item in enumerate(data):
        provider = item.get("provider") if isinstance(item, dict) else None
        where = f"item {i}" + (f" ({provider})" if isinstance(provider, str) else "")
        try:
            if not isinstance(item, dict):
                raise InputError("must be an object")
            signer = SIGNERS.get(provider) if isinstance(provider, str) else None
            if signer is None:
                raise InputError(
                    f"unknown provider {json.dumps(provider)}; sign.py does: {', '.join(SIGNERS)} "
                    "(stripe, github, twilio, discord and npm standard: sign.mjs)"
                )
            out.append({"provider": provider, **signer(item)})
        except Exception as e:  # noqa: BLE001 - every failure is reported the same way
            raise InputError(f"{where}: {e}") from e
    sys.stdout.buffer.write((json.dumps(out, ensure_ascii=False) + "\n").encode("utf-8"))


if __name__ == "__main__":
    try:
        main()
    except InputError as e:
        sys.stderr.write(f"sign.py: {e}\n")
        sys.exit(1)
