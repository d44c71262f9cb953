"""Container removal off the caller's path: ``reap`` queues one, ``drain`` waits for the queue.

``docker rm -f`` is slow engine work (it stops and deletes the container); a session's close should
not wait for it. Closing
drops the channel (the kernel exits on EOF) and queues the removal here; ``drain()`` waits for the
queue (the runtime's close and interpreter exit call it), and the stale-owner cleanup at the next
start covers a process that died before draining.
"""

from __future__ import annotations

import atexit
import queue
import shutil
import threading
from collections.abc import Callable
from pathlib import Path

__all__ = ["drain", "reap"]

_jobs: queue.Queue[tuple[Callable[[], None], Path | None]] = queue.Queue()
_lock = threading.Lock()
_thread: threading.Thread | None = None


def _work() -> None:
    while True:
        remove, directory = _jobs.get()
        try:
            remove()
        except Exception:  # the stale-owner cleanup will find what failed here
            pass
        finally:
            if directory is not None:
                shutil.rmtree(directory, ignore_errors=True)
            _jobs.task_done()


def reap(remove: Callable[[], None], directory: Path | None = None) -> None:
    """Run ``remove()`` (then delete ``directory``) on the reaper thread."""
    global _thread
    with _lock:
        if _thread is None or not _thread.is_alive():
            _thread = threading.Thread(target=_work, name="codeact-reaper", daemon=True)
            _thread.start()
    _jobs.put((remove, directory))


def drain(timeout_s: float = 60.0) -> bool:
    """Wait until every queued removal has run; False if the timeout passed first."""
    done = threading.Event()

    def wait() -> None:
        _jobs.join()
        done.set()

    threading.Thread(target=wait, daemon=True).start()
    return done.wait(timeout_s)


atexit.register(drain, 30.0)
