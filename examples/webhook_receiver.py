#!/usr/bin/env python3
"""An example endpoint for lockd's webhooks (--webhooks-file), standard
library only: it checks each delivery's Lockd-Signature, ignores a delivery
it has already seen (by the signed body's id, which the Lockd-Event-Id header
only copies; delivery is at least once) and prints
the event as one JSON line.

    LOCKD_WEBHOOK_SECRET=... python3 webhook_receiver.py 127.0.0.1 9000

lockd delivers to a loopback or private address only when the webhooks file
allows it for that endpoint:

    webhooks:
      - url: http://127.0.0.1:9000/
        secret: "..."          # the same as LOCKD_WEBHOOK_SECRET
        allow_private: true    # 127.0.0.1 is this host
"""
import hashlib
import hmac
import json
import os
import sys
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

TOLERANCE = 300  # seconds: refuse replays of old deliveries


def verify(secret, header, body, now=None):
    """True when header ("t=<unix>,v1=<hex>") is HMAC-SHA256(secret, "<t>.<body>")
    and t is recent. body is the raw bytes of the request."""
    now = time.time() if now is None else now
    t, sigs = None, []
    for part in (header or "").split(","):
        k, _, v = part.strip().partition("=")
        if k == "t":
            t = v
        elif k == "v1":
            sigs.append(v)
    if not t or not t.isdigit() or not sigs or abs(now - int(t)) > TOLERANCE:
        return False
    want = hmac.new(secret.encode(), t.encode() + b"." + body, hashlib.sha256).hexdigest()
    return any(hmac.compare_digest(s, want) for s in sigs)


class Handler(BaseHTTPRequestHandler):
    secret = ""
    seen = set()  # use your database in real use

    def do_POST(self):
        body = self.rfile.read(min(int(self.headers.get("Content-Length", 0)), 65536))
        if not verify(self.secret, self.headers.get("Lockd-Signature"), body):
            self.send_response(401)
            self.end_headers()
            return
        event = json.loads(body)
        if event.get("id") != self.headers.get("Lockd-Event-Id"):
            self.send_response(400)
            self.end_headers()
            return
        if event["id"] not in self.seen:
            self.seen.add(event["id"])
            print(json.dumps(event, sort_keys=True), flush=True)
        self.send_response(204)  # any 2xx: delivered
        self.end_headers()

    def log_message(self, *args):
        pass


def main():
    secret = os.environ.get("LOCKD_WEBHOOK_SECRET")
    if not secret:
        sys.exit("set LOCKD_WEBHOOK_SECRET to the endpoint's secret from the webhooks file")
    host, port = sys.argv[1], int(sys.argv[2])
    Handler.secret = secret
    srv = ThreadingHTTPServer((host, port), Handler)
    print("listening on %s:%d" % srv.server_address[:2], flush=True)
    srv.serve_forever()


if __name__ == "__main__":
    main()
