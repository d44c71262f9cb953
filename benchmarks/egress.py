"""``--only egress``: a request through the egress broker (issue 32) against the same request from the host.

A loopback HTTP server; the code in the sandbox GETs a small body with urllib through the proxy
(the forwarder on the sandbox's loopback, the channel directory's Unix socket, the host's broker),
timed inside per request; the host GETs the same URL directly with urllib. Then the code downloads
1 MiB through the broker, timed inside, as MiB/s.
"""

from __future__ import annotations

import json
import threading
import time
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from codeact import Egress, Runtime

from ._common import Baseline, Context, Row, med_p90, ratio

ROWS = [
    ("egress_get", "small GET through the egress broker (code in the sandbox) vs from the host", "ms", "—"),
    ("egress_mib", "1 MiB download through the egress broker", "MiB/s", "—"),
]
_MIB = 1024 * 1024


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        body = b"x" * (_MIB if self.path == "/mib" else 64)
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


def _inside(url: str, n: int) -> str:
    return f"""
import json, time, urllib.request
times = []
for _ in range({n}):
    t = time.perf_counter()
    urllib.request.urlopen("{url}", timeout=30).read()
    times.append(time.perf_counter() - t)
print(json.dumps(times))
"""


def measure(ctx: Context) -> list[Row]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    port = int(server.server_address[1])
    base = f"http://127.0.0.1:{port}"
    n, n_mib = ctx.n(200, 10), ctx.n(20, 3)
    egress = Egress(allow=(f"127.0.0.1:{port}",), rate_per_s=10_000, burst=10_000, max_requests_per_run=100_000)
    try:
        with Runtime([], ctx.subject.model_copy(update={"egress": egress})) as rt, rt.session() as session:
            session.run(_inside(f"{base}/small", 5))  # warm: imports, the first connection
            result = session.run(_inside(f"{base}/small", n))
            assert result.ok, result.stderr
            broker_ms = [t * 1000 for t in json.loads(result.stdout)]
            host_ms = []
            opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
            for _ in range(n):
                t = time.perf_counter()
                opener.open(f"{base}/small", timeout=30).read()
                host_ms.append((time.perf_counter() - t) * 1000)
            result = session.run(_inside(f"{base}/mib", n_mib))
            assert result.ok, result.stderr
            rates = [1 / t for t in json.loads(result.stdout)]
    finally:
        server.shutdown()
        server.server_close()
    med, p90 = med_p90(broker_ms)
    host_med, host_p90 = med_p90(host_ms)
    mib_med, mib_p90 = med_p90(rates)
    label = ctx.subject_label
    return [
        Row("egress_get", ROWS[0][1], "ms", med, p90, [Baseline("host urllib, direct", host_med, host_p90)],
            ratio=ratio(med, host_med), ratio_label="× host direct", samples=n,
            note=f"{label}; urllib in the sandbox through HTTP_PROXY, 64-byte body, a new connection each"),
        Row("egress_mib", ROWS[1][1], "MiB/s", mib_med, mib_p90, samples=n_mib,
            note=f"{label}; the broker buffers each response (caps, records) before the code gets it"),
    ]
