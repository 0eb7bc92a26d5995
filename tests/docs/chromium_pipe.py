"""A headless Chromium driven over the DevTools protocol on a pipe (no websocket library).

``--remote-debugging-pipe`` makes Chromium read protocol messages (JSON, each ended by a NUL
byte) from file descriptor 3 and write its answers and events to descriptor 4. One browser
renders every page of the site in turn, which is much faster than one ``--dump-dom``
process per page, and it also reports every request a page makes.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import shutil
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

CHROMIUM_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-extensions",
    "--remote-debugging-pipe",
)


def find_chromium() -> str | None:
    """The Chromium binary, or ``None`` when there is none."""
    for name in ("/usr/bin/chromium", "chromium", "chromium-browser", "google-chrome"):
        found = shutil.which(name)
        if found:
            return found
    return None


@dataclass
class Rendered:
    """A page as the browser showed it."""

    url: str
    html: str
    #: Every URL the page requested (the page itself, styles, scripts, images, ...).
    requested: list[str] = field(default_factory=list)
    #: ``(url, status)`` of every response with an HTTP error status.
    failed: list[tuple[str, int]] = field(default_factory=list)
    #: ``(url, reason)`` of every request that never got a response.
    unreachable: list[tuple[str, str]] = field(default_factory=list)


class Chromium:
    """One headless browser; :meth:`render` loads a URL and returns its DOM after load."""

    def __init__(self, binary: str, profile_dir: Path) -> None:
        to_browser_read, self._to_browser = os.pipe()
        self._from_browser, from_browser_write = os.pipe()

        def wire_pipes() -> None:  # runs in the child: its fds 3 and 4 are the pipes
            read, write = os.dup(to_browser_read), os.dup(from_browser_write)
            os.dup2(read, 3)
            os.dup2(write, 4)

        self._process = subprocess.Popen(
            [binary, *CHROMIUM_FLAGS, f"--user-data-dir={profile_dir}", "about:blank"],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            preexec_fn=wire_pipes,
            pass_fds=(3, 4),
        )
        os.close(to_browser_read)
        os.close(from_browser_write)
        self._buffer = b""
        self._next_id = 0
        self._events: list[dict[str, Any]] = []
        target = self.call("Target.createTarget", {"url": "about:blank"})["targetId"]
        attached = self.call("Target.attachToTarget", {"targetId": target, "flatten": True})
        self._session: str = attached["sessionId"]
        for domain in ("Page", "Network", "Runtime"):
            self.call(f"{domain}.enable", session=self._session)

    def _send(self, method: str, params: dict[str, Any], session: str | None) -> int:
        self._next_id += 1
        message: dict[str, Any] = {"id": self._next_id, "method": method, "params": params}
        if session is not None:
            message["sessionId"] = session
        os.write(self._to_browser, json.dumps(message).encode() + b"\0")
        return self._next_id

    def _receive(self, deadline: float) -> dict[str, Any]:
        while b"\0" not in self._buffer:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError("Chromium did not answer in time")
            ready, _, _ = select.select([self._from_browser], [], [], left)
            if not ready:
                continue
            chunk = os.read(self._from_browser, 1 << 16)
            if not chunk:
                raise RuntimeError("Chromium closed the pipe (did it crash?)")
            self._buffer += chunk
        message, _, self._buffer = self._buffer.partition(b"\0")
        parsed: dict[str, Any] = json.loads(message)
        return parsed

    def call(
        self,
        method: str,
        params: dict[str, Any] | None = None,
        session: str | None = None,
        timeout: float = 30.0,
    ) -> dict[str, Any]:
        """Send one command and wait for its answer; events seen meanwhile are kept."""
        wanted = self._send(method, params or {}, session)
        deadline = time.monotonic() + timeout
        while True:
            message = self._receive(deadline)
            if message.get("id") == wanted:
                if "error" in message:
                    raise RuntimeError(f"{method}: {message['error']}")
                result: dict[str, Any] = message.get("result", {})
                return result
            if "method" in message:
                self._events.append(message)

    def render(self, url: str, timeout: float = 30.0) -> Rendered:
        """Load ``url``, wait for its load event, and return the DOM and its requests.

        Only requests of this navigation count (by its loader id): a late request of the
        page before, such as its favicon, is not this page's.
        """
        self._events.clear()
        navigated = self.call("Page.navigate", {"url": url}, self._session, timeout)
        loader = navigated.get("loaderId")
        deadline = time.monotonic() + timeout
        while not any(e["method"] == "Page.loadEventFired" for e in self._events):
            message = self._receive(deadline)
            if "method" in message:
                self._events.append(message)
        dom = self.call(
            "Runtime.evaluate",
            {"expression": "document.documentElement.outerHTML", "returnByValue": True},
            self._session,
            timeout,
        )
        rendered = Rendered(url, dom["result"]["value"])
        ours: dict[str, str] = {}
        for event in self._events:
            params = event.get("params", {})
            if event["method"] == "Network.requestWillBeSent" and params["loaderId"] == loader:
                ours[params["requestId"]] = params["request"]["url"]
                rendered.requested.append(params["request"]["url"])
            elif event["method"] == "Network.responseReceived":
                response = params["response"]
                if params["requestId"] in ours and response["status"] >= 400:
                    rendered.failed.append((response["url"], response["status"]))
            elif (
                event["method"] == "Network.loadingFailed"
                and params["requestId"] in ours
                and not params.get("canceled")  # a fetch the page itself gave up on
            ):
                reason = params.get("errorText", "")
                rendered.unreachable.append((ours[params["requestId"]], reason))
        return rendered

    def evaluate(self, expression: str, timeout: float = 30.0) -> Any:
        """The value of a JavaScript expression in the page last rendered."""
        answer = self.call(
            "Runtime.evaluate",
            {"expression": expression, "returnByValue": True},
            self._session,
            timeout,
        )
        if "exceptionDetails" in answer:
            raise RuntimeError(f"{expression!r} threw: {answer['exceptionDetails']}")
        return answer["result"].get("value")

    def emulate(self, width: int, height: int, color_scheme: str | None = None) -> None:
        """Render the next pages ``width`` x ``height`` CSS pixels wide, and (when
        ``color_scheme`` is ``"light"`` or ``"dark"``) with that ``prefers-color-scheme``."""
        self.call(
            "Emulation.setDeviceMetricsOverride",
            {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": False},
            self._session,
        )
        features = [{"name": "prefers-color-scheme", "value": color_scheme or ""}]
        self.call("Emulation.setEmulatedMedia", {"features": features}, self._session)

    def screenshot(self, path: Path, full_page: bool = False) -> Path:
        """A PNG of the page last rendered (the viewport, or the whole page)."""
        import base64

        params: dict[str, Any] = {"format": "png", "captureBeyondViewport": full_page}
        shot = self.call("Page.captureScreenshot", params, self._session)
        path.write_bytes(base64.b64decode(shot["data"]))
        return path

    def close(self) -> None:
        """Close the browser and wait for it."""
        with contextlib.suppress(RuntimeError, TimeoutError, OSError):
            self.call("Browser.close", timeout=5)
        try:
            self._process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait()
        os.close(self._to_browser)
        os.close(self._from_browser)
