"""``python -m benchmarks.hostpath``: the host's own cost per tool call, no sandbox, no socket.

Where a tool call's time goes, piece by piece, in one process: the host's bookkeeping for one call
(decode the frame, check it, bound → lookup → validate → record → run → record → reply payload →
encode) run inline on one thread (as a session runs a plain tool: on the thread that reads the
frames), then the same with the hand-off to a pool thread a tool seen slow still gets, and the
sandbox client's own cost with and without its reader-thread hand-off.
Compare with the transport floor (``make bench``) to see what is bookkeeping and what is hand-offs.
"""

from __future__ import annotations

import json
import queue
import threading
import time
from typing import Any

from codeact.kernel import client
from codeact.kernel.protocol import decode_bounded, encode
from codeact.runtime._loop import LoopThread
from codeact.runtime.ledger import CallLedger
from codeact.runtime.toolhost import ToolHost
from codeact.runtime.toolset import Toolset
from codeact.sandbox._outcome import call_problem

from ._common import echo

N = 20_000


def _frame(i: int) -> bytes:
    return encode({"type": "call", "seq": i, "name": "echo", "arguments": {"x": i}})[4:]


def host_inline(host: ToolHost) -> float:
    """CPU µs per call of the host's bookkeeping, all on this thread."""
    store = host.new_store()
    ledger = CallLedger(store)
    frames = [_frame(i) for i in range(N)]  # the sandbox's work, not timed
    start = time.process_time()
    for i in range(1, N):
        if i % 5000 == 0:
            ledger = CallLedger(store)
        body = frames[i]
        message = decode_bounded(body, host.limits.max_argument_bytes)
        call_problem(message)
        handed = host.dispatch(ledger, message["name"], message["arguments"],
                               lambda p, i=i: encode({"type": "result", "seq": i, **p}), len(body), inline=True)
        assert handed is not None and handed[2] is not None  # the inline lane: run on this thread
        handed[2]()
    return (time.process_time() - start) / N * 1e6


def host_dispatch(host: ToolHost) -> float:
    """Wall µs per call through ``dispatch`` (one hand-off to a pool thread and back)."""
    store = host.new_store()
    ledger = CallLedger(store)
    answered = threading.Event()
    frames = [_frame(i) for i in range(N)]
    start = time.perf_counter()
    for i in range(1, N):
        if i % 5000 == 0:
            ledger = CallLedger(store)
        body = frames[i]
        message = decode_bounded(body, host.limits.max_argument_bytes)
        call_problem(message)
        answered.clear()
        host.dispatch(ledger, message["name"], message["arguments"],
                      lambda p, i=i: (encode({"type": "result", "seq": i, **p}), answered.set()), len(body))
        answered.wait()
    return (time.perf_counter() - start) / N * 1e6


def kernel_client() -> tuple[float, float]:
    """(CPU µs per call of the sandbox client answered inline, wall µs with a reader thread)."""
    inline: client.ToolClient

    def send_inline(message: dict[str, Any]) -> None:
        encode(message)
        inline.deliver(json.loads(b'{"type":"result","seq":%d,"ok":true,"value":1}' % message["seq"]))

    inline = client.ToolClient(send_inline)
    start = time.process_time()
    for i in range(N):
        inline.call("echo", {"x": i})
    cpu = (time.process_time() - start) / N * 1e6
    seqs: queue.SimpleQueue[int | None] = queue.SimpleQueue()
    threaded = client.ToolClient(lambda m: (encode(m), seqs.put(m["seq"])))

    def reader() -> None:
        while (seq := seqs.get()) is not None:
            threaded.deliver({"type": "result", "seq": seq, "ok": True, "value": 1})

    threading.Thread(target=reader, daemon=True).start()
    start = time.perf_counter()
    for i in range(N):
        threaded.call("echo", {"x": i})
    seqs.put(None)
    return cpu, (time.perf_counter() - start) / N * 1e6


def main() -> None:
    loop = LoopThread()
    try:
        host = ToolHost(Toolset([echo]), loop)
        host_inline(host)  # warm-up
        print(f"host bookkeeping, inline:           {host_inline(host):6.1f} µs CPU per call")
        print(f"host dispatch with pool hand-off:   {host_dispatch(host):6.1f} µs wall per call")
        cpu, wall = kernel_client()
        print(f"sandbox client, answered inline:    {cpu:6.1f} µs CPU per call")
        print(f"sandbox client, reader hand-off:    {wall:6.1f} µs wall per call")
    finally:
        loop.close()


if __name__ == "__main__":
    main()
