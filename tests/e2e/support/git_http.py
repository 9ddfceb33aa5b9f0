#!/usr/bin/env python3
"""git's smart HTTP for the end-to-end tests (SPEC §20.3): `git http-backend` behind a
small HTTP server that asks for a token, as a forge does. Usage:

    git_http.py ROOT USERNAME TOKEN

Serves the repositories under ROOT on 127.0.0.1, answering 401 to a request without
`Authorization: Basic base64(USERNAME:TOKEN)`; appends each request's method, path and
status to ROOT/requests.log; prints its port on stdout once it listens. While the file
ROOT/gate exists, a request is held (logged with the status `held`) until it is removed.
"""

import base64
import os
import subprocess
import sys
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

root, username, token = sys.argv[1], sys.argv[2], sys.argv[3]
expected = "Basic " + base64.b64encode(f"{username}:{token}".encode()).decode()


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log(self, status):
        with open(os.path.join(root, "requests.log"), "a") as log:
            log.write(f"{self.command} {self.path} {status}\n")

    def serve(self):
        if self.headers.get("authorization") != expected:
            self.log(401)
            self.send_response(401)
            self.send_header("WWW-Authenticate", 'Basic realm="git"')
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        gate = os.path.join(root, "gate")
        if os.path.exists(gate):
            self.log("held")
            while os.path.exists(gate):
                time.sleep(0.05)
        path, _, query = self.path.partition("?")
        body = self.rfile.read(int(self.headers.get("content-length", "0")))
        env = {
            "PATH": os.environ["PATH"],
            "GIT_PROJECT_ROOT": root,
            "GIT_HTTP_EXPORT_ALL": "1",
            "GIT_CONFIG_NOSYSTEM": "1",
            "GIT_CONFIG_GLOBAL": "/dev/null",
            "REQUEST_METHOD": self.command,
            "PATH_INFO": path,
            "QUERY_STRING": query,
            "CONTENT_TYPE": self.headers.get("content-type", ""),
            "CONTENT_LENGTH": str(len(body)),
            "GIT_PROTOCOL": self.headers.get("git-protocol", ""),
            "REMOTE_USER": username,
        }
        if self.headers.get("content-encoding"):
            env["HTTP_CONTENT_ENCODING"] = self.headers["content-encoding"]
        output = subprocess.run(["git", "http-backend"], input=body, env=env, capture_output=True).stdout
        head, _, content = output.partition(b"\r\n\r\n")
        status, headers = 200, []
        for line in head.decode().split("\r\n"):
            name, _, value = line.partition(": ")
            if name.lower() == "status":
                status = int(value.split()[0])
            elif name:
                headers.append((name, value))
        self.log(status)
        self.send_response(status)
        for name, value in headers:
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(content)))
        self.end_headers()
        self.wfile.write(content)

    do_GET = serve
    do_POST = serve

    def log_message(self, *args):
        pass


server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
print(server.server_address[1], flush=True)
server.serve_forever()
