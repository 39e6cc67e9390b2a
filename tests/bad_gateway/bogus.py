"""A bogus gateway for tests/bad_gateway.rs: listens on FLEET_LISTEN and misbehaves as MODE says.

    garbage   answers every connection with bytes that are not HTTP
    nonsense  answers every request 200 with an HTML page (where JSON is expected)
    dies      answers /readyz 200 once, then exits with status 3
"""
import os
import socket
import sys
from http.server import BaseHTTPRequestHandler, HTTPServer

MODE = sys.argv[1]
HOST, PORT = os.environ["FLEET_LISTEN"].rsplit(":", 1)


def garbage():
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind((HOST, int(PORT)))
    s.listen(16)
    while True:
        c, _ = s.accept()
        try:
            c.recv(4096)
            c.sendall(b"\x00\x01GARBAGE, not HTTP\r\n\xff")
        finally:
            c.close()


class Nonsense(BaseHTTPRequestHandler):
    def _answer(self):
        body = b"<html>not a fleet gateway</html>"
        self.send_response(200)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_POST = do_DELETE = _answer


class Dies(BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"ok")
        self.wfile.flush()
        print("bogus: ready answered, exiting", file=sys.stderr, flush=True)
        os._exit(3)


if MODE == "garbage":
    garbage()
else:
    HTTPServer((HOST, int(PORT)), {"nonsense": Nonsense, "dies": Dies}[MODE]).serve_forever()
