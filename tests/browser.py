"""A real headless Chromium driven over the DevTools protocol on a pipe (no port, no websocket).

``--remote-debugging-pipe`` makes Chromium read commands on fd 3 and write replies and events on
fd 4, each a JSON object ended by a NUL byte. Used by the viewer's browser test and to take the
screenshot in docs/viewer.md (``python -m tests.browser PAGE.html OUT.png``).
"""

from __future__ import annotations

import base64
import fcntl
import itertools
import json
import os
import select
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--disable-extensions", "--disable-default-apps", "--mute-audio", "--hide-scrollbars"]


def find_chromium() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        path = shutil.which(name)
        if path:
            return path
    return None


def _high(fd: int) -> int:
    moved = fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 10)
    os.close(fd)
    return moved


class BrowserError(RuntimeError):
    pass


class Chromium:
    """One headless browser with one page; ``console`` collects errors the page reported."""

    def __init__(self, binary: str, *, width: int = 1280, height: int = 900, timeout_s: float = 60.0) -> None:
        self.timeout_s = timeout_s
        self.profile = tempfile.mkdtemp(prefix="codeact-chromium-")
        to_browser_r, self._to_browser = os.pipe()
        self._from_browser, from_browser_w = os.pipe()
        # The shell moves the browser's ends to fds 3 and 4, where Chromium expects them; first
        # they go above 9 so that no move can clobber the other (either may be 3 or 4 here).
        to_browser_r, from_browser_w = (_high(to_browser_r), _high(from_browser_w))
        script = f'exec "$0" "$@" 3<&{to_browser_r} 4>&{from_browser_w} {to_browser_r}<&- {from_browser_w}>&-'
        args = [*FLAGS, f"--user-data-dir={self.profile}", f"--window-size={width},{height}",
                "--remote-debugging-pipe", "about:blank"]
        self.proc = subprocess.Popen(["bash", "-c", script, binary, *args], pass_fds=(to_browser_r, from_browser_w),
                                     stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        os.close(to_browser_r)
        os.close(from_browser_w)
        self._ids = itertools.count(1)
        self._buf = b""
        self.events: list[dict[str, Any]] = []
        self.console: list[str] = []
        self.session = ""
        try:
            self._attach(width, height)
        except BaseException:
            self.close()
            raise

    # -- the pipe ----------------------------------------------------------------------------
    def _read_message(self, deadline: float) -> dict[str, Any]:
        while b"\0" not in self._buf:
            left = deadline - time.monotonic()
            if left <= 0:
                raise BrowserError("Chromium did not answer in time")
            ready, _, _ = select.select([self._from_browser], [], [], left)
            if ready:
                chunk = os.read(self._from_browser, 1 << 20)
                if not chunk:
                    raise BrowserError(f"Chromium closed the pipe (exit status {self.proc.poll()})")
                self._buf += chunk
        raw, self._buf = self._buf.split(b"\0", 1)
        message: dict[str, Any] = json.loads(raw)
        return message

    def _note(self, event: dict[str, Any]) -> None:
        self.events.append(event)
        method, params = event.get("method"), event.get("params", {})
        if method == "Runtime.exceptionThrown":
            details = params.get("exceptionDetails", {})
            self.console.append(f"exception: {details.get('text')} {details.get('exception', {}).get('description')}")
        elif method == "Runtime.consoleAPICalled" and params.get("type") in ("error", "assert"):
            self.console.append("console.error: " + " ".join(str(a.get("value")) for a in params.get("args", [])))
        elif method == "Log.entryAdded" and params.get("entry", {}).get("level") == "error":
            entry = params["entry"]
            self.console.append(f"log: {entry.get('source')}: {entry.get('text')} {entry.get('url', '')}")

    def send(self, method: str, params: dict[str, Any] | None = None, *, session: bool = True) -> dict[str, Any]:
        """One command; returns its result (events that arrive meanwhile are kept)."""
        msg_id = next(self._ids)
        message: dict[str, Any] = {"id": msg_id, "method": method, "params": params or {}}
        if session and self.session:
            message["sessionId"] = self.session
        os.write(self._to_browser, json.dumps(message).encode() + b"\0")
        deadline = time.monotonic() + self.timeout_s
        while True:
            reply = self._read_message(deadline)
            if reply.get("id") == msg_id:
                if "error" in reply:
                    raise BrowserError(f"{method}: {reply['error']}")
                result: dict[str, Any] = reply.get("result", {})
                return result
            self._note(reply)

    def wait_event(self, method: str) -> dict[str, Any]:
        for event in self.events:
            if event.get("method") == method:
                self.events.remove(event)
                return event
        deadline = time.monotonic() + self.timeout_s
        while True:
            event = self._read_message(deadline)
            self._note(event)
            if event.get("method") == method:
                self.events.remove(event)
                return event

    def _attach(self, width: int, height: int) -> None:
        targets = self.send("Target.getTargets", session=False)["targetInfos"]
        page = next(t for t in targets if t.get("type") == "page")
        self.session = self.send("Target.attachToTarget", {"targetId": page["targetId"], "flatten": True},
                                 session=False)["sessionId"]
        for domain in ("Page", "Runtime", "Log"):
            self.send(f"{domain}.enable")
        self.send("Emulation.setDeviceMetricsOverride",
                  {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": False})

    # -- what tests use ----------------------------------------------------------------------
    def open(self, path: Path) -> None:
        """Navigate to a local file and wait until it has loaded."""
        self.events.clear()
        self.send("Page.navigate", {"url": path.resolve().as_uri()})
        self.wait_event("Page.loadEventFired")

    def evaluate(self, expression: str) -> Any:
        reply = self.send("Runtime.evaluate", {"expression": expression, "returnByValue": True})
        if "exceptionDetails" in reply:
            raise BrowserError(f"{expression!r} raised: {reply['exceptionDetails'].get('text')}")
        return reply["result"].get("value")

    def screenshot(self, out: Path, *, full_page: bool = False, max_height: int = 4000) -> Path:
        params: dict[str, Any] = {"format": "png"}
        if full_page:
            size = self.send("Page.getLayoutMetrics")["cssContentSize"]
            params.update(captureBeyondViewport=True, clip={"x": 0, "y": 0, "width": size["width"],
                                                            "height": min(size["height"], max_height), "scale": 1})
        data = self.send("Page.captureScreenshot", params)["data"]
        out.write_bytes(base64.b64decode(data))
        return out

    def close(self) -> None:
        try:
            if self.proc.poll() is None:
                try:
                    self.send("Browser.close", session=False)
                except (BrowserError, OSError):
                    pass
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
        finally:
            for fd in (self._to_browser, self._from_browser):
                try:
                    os.close(fd)
                except OSError:
                    pass
            shutil.rmtree(self.profile, ignore_errors=True)

    def __enter__(self) -> Chromium:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def main(argv: list[str]) -> None:
    """``python -m tests.browser PAGE.html OUT.png [WIDTH HEIGHT]``: a screenshot of a page."""
    binary = find_chromium()
    if binary is None:
        raise SystemExit("no chromium on PATH (scripts/ensure-chromium.sh installs it)")
    width, height = (int(argv[2]), int(argv[3])) if len(argv) > 3 else (1280, 900)
    with Chromium(binary, width=width, height=height) as browser:
        browser.open(Path(argv[0]))
        browser.screenshot(Path(argv[1]))
        if browser.console:
            raise SystemExit("\n".join(browser.console))


if __name__ == "__main__":
    main(sys.argv[1:])
