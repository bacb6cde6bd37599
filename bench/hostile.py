#!/usr/bin/env python3
"""bench/hostile.py: what strangers cost a running replaysafe (issue 15).

Driven by bench/hostile, against a release binary on a fresh database:
  slowloris  N clients from other loopback addresses that trickle header
             bytes and reconnect when cut off, for --hold seconds; reports how
             long the server let their connections live (bench/hostile runs
             wrk beside it for what real deliveries saw).
  flood      unsigned 1 MiB requests; the database's growth for them.
  signin     parallel sign-ins with a wrong password; the server's peak memory.
  faketokens N clients from other loopback addresses sending API requests
             with made-up bearer tokens and pages with made-up session
             cookies (--credentials none: API requests with none) on
             kept-alive connections, as fast as they are answered or at
             --rate in all, for --hold seconds; the answers by status
             (bench/hostile runs wrk beside it for what real deliveries saw).
Prints one JSON object per phase.
"""
import argparse, asyncio, json, os, time, urllib.request


async def trickle(host, port, source, every, until):
    """One slow client for the attack's length: a request line, then a
    header byte every `every` s; when the server closes it, it comes back.
    Returns how long the server let each of its connections live."""
    held = []
    while time.monotonic() < until:
        try:
            reader, writer = await asyncio.open_connection(host, port, local_addr=(source, 0))
        except OSError:
            await asyncio.sleep(every)
            continue
        start = time.monotonic()
        closed = False
        try:
            writer.write(b"POST /hooks/bench HTTP/1.1\r\nHost: x\r\nX-Slow: ")
            await writer.drain()
            while time.monotonic() < until:
                try:
                    data = await asyncio.wait_for(reader.read(512), timeout=every)
                    if not data:
                        closed = True
                        break
                except asyncio.TimeoutError:
                    writer.write(b"a")
                    await writer.drain()
        except (ConnectionError, OSError):
            closed = True
        finally:
            writer.close()
        if closed:
            held.append(time.monotonic() - start)
    return held


async def slowloris(args):
    sources = [f"127.0.0.{2 + i}" for i in range(args.addresses)]
    until = time.monotonic() + args.hold
    results = await asyncio.gather(*[
        trickle("127.0.0.1", args.port, sources[i % len(sources)], args.every, until)
        for i in range(args.connections)
    ])
    held = sorted(h for r in results for h in r)
    print(json.dumps({
        "phase": "slowloris",
        "clients": args.connections,
        "addresses": args.addresses,
        "attack_seconds": args.hold,
        "connections_closed_by_server": len(held),
        "seconds_held_median": round(held[len(held) // 2], 1) if held else None,
        "seconds_held_max": round(held[-1], 1) if held else None,
    }))


def relation_bytes(psql_url):
    import subprocess
    out = subprocess.run(
        ["psql", psql_url, "-Atc",
         "SELECT pg_total_relation_size('deliveries') + pg_total_relation_size('unrecorded_rejections')"],
        check=True, capture_output=True, text=True)
    return int(out.stdout.strip())


def flood(args):
    before = relation_bytes(args.database)
    body = os.urandom(1024 * 1024 - 64)
    statuses = {}
    for n in range(args.requests):
        request = urllib.request.Request(
            f"http://127.0.0.1:{args.port}/hooks/bench", data=body, method="POST",
            headers={"webhook-id": f"forged-{n}", "webhook-timestamp": str(int(time.time())),
                     "webhook-signature": "v1,AAAA"})
        try:
            status = urllib.request.urlopen(request, timeout=30).status
        except urllib.error.HTTPError as e:
            status = e.code
        statuses[status] = statuses.get(status, 0) + 1
    time.sleep(6)  # the unrecorded counts are written every 5 s
    growth = relation_bytes(args.database) - before
    print(json.dumps({
        "phase": "flood", "requests": args.requests, "mib_sent": round(args.requests * len(body) / 2**20, 1),
        "statuses": statuses, "database_growth_bytes": growth,
    }))


def vm_hwm_kb(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    return None


async def one_signin(port, n):
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    body = f"username=bench-user&password=wrong-guess-{n}".encode()
    writer.write(
        b"POST /api/login HTTP/1.1\r\nHost: x\r\nOrigin: http://127.0.0.1:%d\r\n"
        b"Content-Type: application/x-www-form-urlencoded\r\nContent-Length: %d\r\n"
        b"Connection: close\r\n\r\n" % (port, len(body)) + body)
    await writer.drain()
    line = await reader.readline()
    writer.close()
    parts = line.split()
    return int(parts[1]) if len(parts) > 1 else 0


async def signin(args):
    before = vm_hwm_kb(args.pid)
    statuses = await asyncio.gather(*[one_signin(args.port, n) for n in range(args.attempts)])
    counts = {}
    for s in statuses:
        counts[s] = counts.get(s, 0) + 1
    print(json.dumps({
        "phase": "signin", "attempts": args.attempts, "statuses": counts,
        "peak_rss_mb_before": round(before / 1024, 1), "peak_rss_mb_after": round(vm_hwm_kb(args.pid) / 1024, 1),
    }))


async def fake_client(port, source, n, until, counts, every, credentials):
    """One stranger: a kept-alive connection from `source`, a made-up
    credential per request (none with credentials="none"), the next sent as
    soon as the last is answered, or `every` s after the last was sent."""
    next_at = time.monotonic()
    while time.monotonic() < until:
        try:
            reader, writer = await asyncio.open_connection("127.0.0.1", port, local_addr=(source, 0))
        except OSError:
            await asyncio.sleep(0.1)
            continue
        try:
            i = 0
            while time.monotonic() < until:
                if every:
                    next_at += every
                    await asyncio.sleep(max(0.0, next_at - time.monotonic()))
                i += 1
                if credentials == "none":
                    head = b"GET /api/v1/events HTTP/1.1\r\nHost: x\r\n\r\n"
                elif i % 2:
                    head = b"GET /api/v1/events HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer rs_madeup%d_%d\r\n\r\n" % (n, i)
                else:
                    head = b"GET /overview HTTP/1.1\r\nHost: x\r\nCookie: replaysafe_session=madeup%d_%d\r\n\r\n" % (n, i)
                writer.write(head)
                await writer.drain()
                status_line = await reader.readline()
                if not status_line:
                    break
                status = int(status_line.split()[1])
                length = 0
                while True:
                    line = await reader.readline()
                    if line in (b"\r\n", b""):
                        break
                    name, _, value = line.partition(b":")
                    if name.strip().lower() == b"content-length":
                        length = int(value.strip())
                if length:
                    await reader.readexactly(length)
                counts[status] = counts.get(status, 0) + 1
        except (ConnectionError, OSError, asyncio.IncompleteReadError, ValueError, IndexError):
            pass
        finally:
            writer.close()


async def faketokens(args):
    sources = [f"127.0.0.{2 + i}" for i in range(args.addresses)]
    until = time.monotonic() + args.hold
    counts = {}
    every = args.connections / args.rate if args.rate else 0.0
    await asyncio.gather(*[
        fake_client(args.port, sources[i % len(sources)], i, until, counts, every, args.credentials)
        for i in range(args.connections)
    ])
    total = sum(counts.values())
    print(json.dumps({
        "phase": "faketokens", "credentials": args.credentials, "rate_asked": args.rate or "unpaced",
        "clients": args.connections, "addresses": args.addresses,
        "attack_seconds": args.hold, "requests": total,
        "per_second": round(total / args.hold), "statuses": counts,
    }))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("phase", choices=["slowloris", "flood", "signin", "faketokens"])
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--connections", type=int, default=5000)
    p.add_argument("--addresses", type=int, default=25)
    p.add_argument("--every", type=float, default=1.0)
    p.add_argument("--hold", type=float, default=45.0)
    p.add_argument("--requests", type=int, default=100)
    p.add_argument("--database")
    p.add_argument("--attempts", type=int, default=200)
    p.add_argument("--pid", type=int)
    p.add_argument("--rate", type=float, default=0, help="faketokens: requests a second in all (0: unpaced)")
    p.add_argument("--credentials", choices=["fake", "none"], default="fake")
    args = p.parse_args()
    if args.phase == "slowloris":
        asyncio.run(slowloris(args))
    elif args.phase == "flood":
        flood(args)
    elif args.phase == "faketokens":
        asyncio.run(faketokens(args))
    else:
        asyncio.run(signin(args))


if __name__ == "__main__":
    main()
