"""The page server of scripts/browser.sh (stdlib only).

Listens on two free ports of 127.0.0.1, so the same page is served from two origins: the first
one is given to mcp-host as an allowed origin, the second is not. Serves GET /page.html (this
directory's page.html) and takes POST /result?label=NAME from the page, writing the body to
RESULTS_DIR/NAME.json (written to a temporary name, then renamed, so a reader never sees half a
result). Prints "page-server listening on ORIGIN1 ORIGIN2" as its first stdout line and serves
until it is killed.

Usage: python3 server.py RESULTS_DIR
"""

import http.server
import os
import re
import sys
import threading
import urllib.parse

HERE = os.path.dirname(os.path.abspath(__file__))
RESULTS = sys.argv[1]
MAX_RESULT_BYTES = 1 << 20


class Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        path = urllib.parse.urlsplit(self.path).path
        if path == "/page.html":
            with open(os.path.join(HERE, "page.html"), "rb") as f:
                body = f.read()
            self.send_response(200)
            self.send_header("Content-Type", "text/html; charset=utf-8")
            self.send_header("Cache-Control", "no-store")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
        else:
            self.send_response(404)
            self.send_header("Content-Length", "0")
            self.end_headers()

    def do_POST(self):
        url = urllib.parse.urlsplit(self.path)
        label = urllib.parse.parse_qs(url.query).get("label", [""])[0]
        length = int(self.headers.get("Content-Length") or 0)
        if url.path != "/result" or not re.fullmatch(r"[a-z-]{1,40}", label) or length > MAX_RESULT_BYTES:
            self.send_response(400)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        body = self.rfile.read(length)
        tmp = os.path.join(RESULTS, f".{label}.tmp")
        with open(tmp, "wb") as f:
            f.write(body)
        os.replace(tmp, os.path.join(RESULTS, f"{label}.json"))
        self.send_response(204)
        self.end_headers()


def main():
    os.makedirs(RESULTS, exist_ok=True)
    servers = [http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler) for _ in range(2)]
    origins = [f"http://127.0.0.1:{s.server_address[1]}" for s in servers]
    print("page-server listening on " + " ".join(origins), flush=True)
    threading.Thread(target=servers[1].serve_forever, daemon=True).start()
    servers[0].serve_forever()


if __name__ == "__main__":
    main()
