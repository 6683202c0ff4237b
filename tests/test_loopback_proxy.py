"""Course traffic to 127.0.0.1 does not go through a proxy set in the environment (helpers.local_http).

A learner behind a corporate proxy has ``http_proxy`` set; without ``no_proxy`` naming loopback, urllib and
httpx (so the openai client) send even 127.0.0.1's requests to the proxy. Here the "proxy" is a closed port
on 127.0.0.1 (nothing leaves the machine): a request that goes through it fails, one that bypasses it reaches
a small HTTP server on 127.0.0.1.
"""

import http.server
import os
import subprocess
import sys
import threading
from pathlib import Path

from helpers.paths import course_pythonpath

ROOT = Path(__file__).resolve().parent.parent

CLIENTS = """
import sys, urllib.request
import httpx
{imports}
url = sys.argv[1]
for name, get in (("urllib", lambda: urllib.request.urlopen(url, timeout=5).read()),
                  ("httpx", lambda: httpx.get(url, timeout=5).content)):
    try:
        print(name, get().decode())
    except Exception as error:
        print(name, "failed:", type(error).__name__)
"""


class Hello(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200)
        self.end_headers()
        self.wfile.write(b"direct")

    def log_message(self, *args):
        pass


def fetch_behind_a_proxy(imports: str) -> str:
    server = http.server.HTTPServer(("127.0.0.1", 0), Hello)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    closed_port = 9  # discard: nothing listens there, so a proxied request fails fast
    env = {key: value for key, value in os.environ.items() if key.lower() not in ("no_proxy", "http_proxy")}
    env.update(http_proxy=f"http://127.0.0.1:{closed_port}", HTTP_PROXY=f"http://127.0.0.1:{closed_port}",
               PYTHONPATH=course_pythonpath(os.environ))
    try:
        run = subprocess.run([sys.executable, "-c", CLIENTS.format(imports=imports),
                              f"http://127.0.0.1:{server.server_port}/"],
                             env=env, capture_output=True, text=True, timeout=60, check=True, cwd=ROOT)
    finally:
        server.shutdown()
    return run.stdout


def test_without_the_helpers_a_proxy_in_the_environment_takes_loopback_requests():
    out = fetch_behind_a_proxy("")
    assert "urllib failed" in out and "httpx failed" in out, out


def test_importing_the_helpers_sends_loopback_requests_direct():
    out = fetch_behind_a_proxy("import helpers")
    assert out.splitlines() == ["urllib direct", "httpx direct"], out
