#!/usr/bin/env python3
"""Hold a lockd lease from Python with the standard library only.

Acquire, renew every ttl/3 from a thread, stop the work as soon as a renew
says the lease is gone (404 or 409), release at the end.

    LOCKD_SERVER=http://127.0.0.1:8080 python3 renew.py KEY [TTL_MS] [WORK_SECONDS]

Exit codes follow the lockd CLI: 0 done, 1 held, 3 lease lost, 4 unreachable.
"""
import json
import os
import sys
import threading
import time
import urllib.error
import urllib.request

SERVER = os.environ.get("LOCKD_SERVER", "http://127.0.0.1:8080").rstrip("/")
API_KEY = os.environ.get("LOCKD_API_KEY", "")
WAIT_MS = int(os.environ.get("WAIT_MS", "5000"))  # how long to wait while the key is held


class LeaseLost(Exception):
    pass


def call(path, body):
    """POST body as JSON; return (status, decoded answer)."""
    headers = {"Content-Type": "application/json"}
    if API_KEY:
        headers["Authorization"] = "Bearer " + API_KEY
    req = urllib.request.Request(SERVER + path, json.dumps(body).encode(), headers, method="POST")
    try:
        with urllib.request.urlopen(req, timeout=70) as resp:
            return resp.status, json.load(resp)
    except urllib.error.HTTPError as e:  # 4xx/5xx carry a problem+json body
        return e.code, json.load(e)


def main():
    key = sys.argv[1]
    ttl_ms = int(sys.argv[2]) if len(sys.argv) > 2 else 30000
    work_seconds = float(sys.argv[3]) if len(sys.argv) > 3 else 1.0

    try:
        status, lease = call(f"/v1/locks/{key}/acquire", {"ttl_ms": ttl_ms, "wait_ms": WAIT_MS, "owner": "renew.py"})
    except urllib.error.URLError as e:
        print(f"lockd unreachable: {e.reason}", file=sys.stderr)
        return 4
    if status == 409:
        print(f"{key} is held by {lease.get('holder')}", file=sys.stderr)
        return 1
    if status != 200:
        print(f"acquire: {lease.get('detail')}", file=sys.stderr)
        return 4
    token = lease["token"]  # secret: never print or log it
    print(f"acquired {key} fence {lease['fence']}", flush=True)

    lost = threading.Event()
    stop = threading.Event()

    def renew_every_third_of_ttl():
        while not stop.wait(ttl_ms / 3000):
            try:
                status, answer = call(f"/v1/locks/{key}/renew", {"token": token})
            except urllib.error.URLError:
                continue  # unreachable: try again next tick, while the lease lasts
            if status == 200:
                print("renewed", flush=True)
            elif status in (404, 409):  # the lease is gone: stop the work
                print(f"lost: {answer.get('detail')}", file=sys.stderr, flush=True)
                lost.set()
                return

    renewer = threading.Thread(target=renew_every_third_of_ttl, daemon=True)
    renewer.start()
    try:
        # The protected work, in small steps that check for loss.
        deadline = time.monotonic() + work_seconds
        while time.monotonic() < deadline:
            if lost.is_set():
                return 3
            time.sleep(0.05)
        print("work done", flush=True)
    finally:
        stop.set()
        renewer.join()
        if not lost.is_set():
            status, _ = call(f"/v1/locks/{key}/release", {"token": token})
            print("released" if status == 200 else f"release answered {status}", flush=True)
    return 3 if lost.is_set() else 0


if __name__ == "__main__":
    sys.exit(main())
