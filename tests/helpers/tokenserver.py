#!/usr/bin/env python3
"""A minimal token server for the distribution registry's `auth: token`.

    tokenserver.py PORTFILE KEY.pem CERT.pem ISSUER LOGFILE

Binds 127.0.0.1 on a free port, writes the port to PORTFILE once it is
listening, and answers GET /token?service=S&scope=repository:NAME:ACTIONS
with {"token": JWT, "access_token": JWT, "expires_in": 300}: a JWT signed
RS256 by `openssl dgst -sha256 -sign KEY.pem`, whose header carries the
certificate as an x5c chain (the registry trusts it through its
rootcertbundle).  Every scope asked for is granted.  Each request is logged
as one JSON line in LOGFILE, so a test can see the token flow happened.
"""
import base64
import json
import os
import subprocess
import sys
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, HTTPServer


def b64url(data):
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def cert_der(path):
    with open(path) as f:
        pem = f.read()
    body = pem.split("-----BEGIN CERTIFICATE-----")[1]
    body = body.split("-----END CERTIFICATE-----")[0]
    return base64.b64decode("".join(body.split()))


def main():
    portfile, key, cert, issuer, logfile = sys.argv[1:6]
    x5c = base64.b64encode(cert_der(cert)).decode()

    def sign(service, scopes):
        access = []
        for scope in scopes:
            parts = scope.split(":")
            if len(parts) < 3:
                continue
            access.append({"type": parts[0], "name": ":".join(parts[1:-1]),
                           "actions": [a for a in parts[-1].split(",") if a]})
        now = int(time.time())
        header = {"typ": "JWT", "alg": "RS256", "x5c": [x5c]}
        claims = {"iss": issuer, "sub": "", "aud": service, "iat": now,
                  "nbf": now - 10, "exp": now + 300,
                  "jti": b64url(os.urandom(12)), "access": access}
        signing_input = (b64url(json.dumps(header).encode()) + "." +
                         b64url(json.dumps(claims).encode()))
        sig = subprocess.run(["openssl", "dgst", "-sha256", "-sign", key],
                             input=signing_input.encode(),
                             stdout=subprocess.PIPE, check=True).stdout
        return signing_input + "." + b64url(sig)

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, fmt, *args):
            pass

        def do_GET(self):
            url = urllib.parse.urlsplit(self.path)
            q = urllib.parse.parse_qs(url.query)
            if url.path != "/token":
                self.send_error(404)
                return
            service = q.get("service", [""])[0]
            scopes = [s for v in q.get("scope", []) for s in v.split(" ") if s]
            with open(logfile, "a") as f:
                f.write(json.dumps({"service": service, "scopes": scopes,
                                    "authorization": "Authorization" in
                                    self.headers}) + "\n")
            token = sign(service, scopes)
            body = json.dumps({"token": token, "access_token": token,
                               "expires_in": 300}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    server = HTTPServer(("127.0.0.1", 0), Handler)
    tmp = portfile + ".tmp"
    with open(tmp, "w") as f:
        f.write("%d\n" % server.server_address[1])
    os.rename(tmp, portfile)
    server.serve_forever()


if __name__ == "__main__":
    main()
