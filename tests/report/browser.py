"""A headless Chromium driven over the DevTools protocol on a pipe (--remote-debugging-pipe:
messages are JSON, NUL-terminated, on file descriptors 3 and 4): no websocket library, no
browser download, only the system's `chromium`."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path


def chromium_path() -> str | None:
    return next(
        (p for n in ("chromium", "chromium-browser", "google-chrome") if (p := shutil.which(n))),
        None,
    )


class Browser:
    """One page of a headless Chromium; `call` sends a command and returns its result,
    keeping every event it saw in `events`."""

    def __init__(self, executable: str, width: int = 1400, height: int = 1000) -> None:
        self._profile = tempfile.TemporaryDirectory(prefix="fitwhisper-chromium-")
        to_child_r, self._to_child = os.pipe()
        self._from_child, from_child_w = os.pipe()
        # The child reads commands on fd 3 and writes answers on fd 4.
        self.proc = subprocess.Popen(
            [
                executable,
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--remote-debugging-pipe",
                f"--user-data-dir={self._profile.name}",
                f"--window-size={width},{height}",
                "--no-first-run",
                "--mute-audio",
                "--autoplay-policy=no-user-gesture-required",
                "about:blank",
            ],
            pass_fds=(3, 4),
            preexec_fn=lambda: (os.dup2(to_child_r, 3), os.dup2(from_child_w, 4)) and None,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        os.close(to_child_r)
        os.close(from_child_w)
        self._buf = b""
        self._id = 0
        self.events: list[dict] = []
        targets = self.call("Target.getTargets")["targetInfos"]
        page = next(t for t in targets if t["type"] == "page")
        self.session = self.call("Target.attachToTarget", targetId=page["targetId"], flatten=True)[
            "sessionId"
        ]

    def call(self, method: str, session: bool = False, timeout: float = 30, **params) -> dict:
        self._id += 1
        msg = {"id": self._id, "method": method, "params": params}
        if session:
            msg["sessionId"] = self.session
        os.write(self._to_child, json.dumps(msg).encode() + b"\0")
        deadline = time.monotonic() + timeout
        while True:
            reply = self._read(deadline)
            if reply.get("id") == self._id:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return reply.get("result", {})
            self.events.append(reply)

    def page(self, method: str, **params) -> dict:
        return self.call(method, session=True, **params)

    def evaluate(self, expression: str):
        r = self.page(
            "Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True
        )
        if "exceptionDetails" in r:
            raise RuntimeError(f"{expression}: {r['exceptionDetails']}")
        return r["result"].get("value")

    def wait_for(self, expression: str, timeout: float = 20) -> None:
        deadline = time.monotonic() + timeout
        while not self.evaluate(expression):
            if time.monotonic() > deadline:
                raise TimeoutError(expression)
            time.sleep(0.05)

    def console_errors(self) -> list[str]:
        """Errors the page reported: console.error, uncaught exceptions, failed loads."""
        out = []
        for e in self.events:
            p = e.get("params", {})
            if e.get("method") == "Runtime.exceptionThrown":
                out.append(str(p["exceptionDetails"].get("exception", p["exceptionDetails"])))
            elif e.get("method") == "Runtime.consoleAPICalled" and p.get("type") == "error":
                out.append(str(p.get("args")))
            elif e.get("method") == "Log.entryAdded" and p["entry"].get("level") == "error":
                out.append(p["entry"].get("text", ""))
        return out

    def screenshot(self, path: Path) -> Path:
        import base64

        data = self.page("Page.captureScreenshot", format="png", captureBeyondViewport=False)
        path.write_bytes(base64.b64decode(data["data"]))
        return path

    def _read(self, deadline: float) -> dict:
        import select

        while b"\0" not in self._buf:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self._from_child], [], [], left)[0]:
                raise TimeoutError("no answer from chromium")
            chunk = os.read(self._from_child, 1 << 20)
            if not chunk:
                raise RuntimeError("chromium closed its pipe")
            self._buf += chunk
        msg, self._buf = self._buf.split(b"\0", 1)
        return json.loads(msg)

    def close(self) -> None:
        try:
            self.call("Browser.close", timeout=5)
        except Exception:
            self.proc.kill()
        self.proc.wait(timeout=10)
        os.close(self._to_child)
        os.close(self._from_child)
        self._profile.cleanup()

    def __enter__(self) -> Browser:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
