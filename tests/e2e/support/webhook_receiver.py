#!/usr/bin/env python3
"""A webhook receiver for the end-to-end tests (SPEC §18).

Verifies each delivery's Standard Webhooks signature with Python's own hmac, an
implementation independent of fleet's; appends what it received to a JSON-lines log;
and answers as told. Usage:

    webhook_receiver.py SECRET LOG ANSWERS [CERT KEY]

With CERT and KEY (PEM files) it serves HTTPS. ANSWERS is a comma-separated list of what to answer to the 1st, 2nd, … request (the
last repeats): a status code, or `hold` (keep the request unanswered for 30 s). It
prints its port on stdout once it listens on 127.0.0.1.
"""

import base64
import hashlib
import hmac
import json
import ssl
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

secret, log_path, answers = sys.argv[1], sys.argv[2], sys.argv[3].split(",")
key = base64.b64decode(secret[len("whsec_"):])
lock = threading.Lock()
count = 0


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_POST(self):
        global count
        body = self.rfile.read(int(self.headers.get("content-length", "0")))
        message = self.headers.get("webhook-id", "")
        timestamp = self.headers.get("webhook-timestamp", "")
        signed = f"{message}.{timestamp}.".encode() + body
        expected = "v1," + base64.b64encode(hmac.new(key, signed, hashlib.sha256).digest()).decode()
        given = self.headers.get("webhook-signature", "").split(" ")
        valid = any(hmac.compare_digest(expected, signature) for signature in given)
        with lock:
            answer = answers[min(count, len(answers) - 1)]
            count += 1
            with open(log_path, "a") as log:
                log.write(json.dumps({
                    "id": message, "timestamp": timestamp, "valid": valid, "at": time.time(),
                    "contentType": self.headers.get("content-type"), "answer": answer,
                    "body": json.loads(body or b"null"),
                }) + "\n")
        if answer == "hold":
            time.sleep(30)
            return
        self.send_response(int(answer))
        self.send_header("content-length", "0")
        self.end_headers()

    def log_message(self, *args):
        pass


server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
if len(sys.argv) > 5:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(sys.argv[4], sys.argv[5])
    server.socket = context.wrap_socket(server.socket, server_side=True)
print(server.server_address[1], flush=True)
server.serve_forever()
