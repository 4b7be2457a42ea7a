"""A small Chrome DevTools protocol client over a stdlib websocket, for the inspector's browser test.

``Browser.launch(path, tmp_dir)`` starts headless Chromium on a free port with a
fresh profile; ``browser.open(url)`` returns a ``Page`` whose ``evaluate(js)``
runs JavaScript and returns its value, ``type(text)`` types into the focused
element and ``click(selector)`` clicks an element where it is drawn.
"""
from __future__ import annotations

import base64
import contextlib
import json
import os
import pathlib
import socket
import struct
import subprocess
import time
import urllib.parse

FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--disable-dev-shm-usage", "--remote-debugging-port=0"]


class WebSocket:
    """The client side of RFC 6455: masked text frames out, text frames in, pings answered."""

    def __init__(self, url: str, timeout: float = 30):
        parts = urllib.parse.urlparse(url)
        self.sock = socket.create_connection((parts.hostname, parts.port), timeout=timeout)
        key = base64.b64encode(os.urandom(16)).decode()
        self.sock.sendall((f"GET {parts.path} HTTP/1.1\r\nHost: {parts.hostname}:{parts.port}\r\n"
                           f"Upgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: {key}\r\n"
                           "Sec-WebSocket-Version: 13\r\n\r\n").encode())
        head = b""
        while b"\r\n\r\n" not in head:
            chunk = self.sock.recv(4096)
            if not chunk:
                raise ConnectionError("the browser closed the websocket handshake")
            head += chunk
        if b" 101 " not in head.split(b"\r\n", 1)[0]:
            raise ConnectionError(f"websocket handshake refused: {head[:200]!r}")
        self.buffer = head.split(b"\r\n\r\n", 1)[1]

    def _exactly(self, n: int) -> bytes:
        while len(self.buffer) < n:
            chunk = self.sock.recv(1 << 16)
            if not chunk:
                raise ConnectionError("the browser closed the websocket")
            self.buffer += chunk
        data, self.buffer = self.buffer[:n], self.buffer[n:]
        return data

    def _frame(self, opcode: int, payload: bytes) -> None:
        mask = os.urandom(4)
        size = len(payload)
        header = bytes([0x80 | opcode])
        if size < 126:
            header += bytes([0x80 | size])
        elif size < 1 << 16:
            header += bytes([0x80 | 126]) + struct.pack(">H", size)
        else:
            header += bytes([0x80 | 127]) + struct.pack(">Q", size)
        self.sock.sendall(header + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(payload)))

    def send(self, text: str) -> None:
        self._frame(0x1, text.encode())

    def receive(self) -> str:
        message = b""
        while True:
            first, second = self._exactly(2)
            size = second & 0x7F
            if size == 126:
                size = struct.unpack(">H", self._exactly(2))[0]
            elif size == 127:
                size = struct.unpack(">Q", self._exactly(8))[0]
            payload = self._exactly(size)
            opcode = first & 0x0F
            if opcode == 0x9:
                self._frame(0xA, payload)
                continue
            if opcode == 0x8:
                raise ConnectionError("the browser closed the websocket")
            message += payload
            if first & 0x80:
                return message.decode()

    def close(self) -> None:
        self.sock.close()


class Page:
    """One tab, attached with a flat session."""

    def __init__(self, browser: Browser, session: str):
        self.browser, self.session = browser, session

    def send(self, method: str, **params) -> dict:
        return self.browser.send(method, params, session=self.session)

    def evaluate(self, expression: str):
        reply = self.send("Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True)
        if "exceptionDetails" in reply:
            raise AssertionError(f"JavaScript failed: {reply['exceptionDetails']}")
        return reply["result"].get("value")

    def wait_for(self, expression: str, timeout: float = 15) -> object:
        """Poll a JavaScript expression until it is truthy; its value, or AssertionError on time-out."""
        deadline = time.monotonic() + timeout
        while True:
            value = self.evaluate(expression)
            if value:
                return value
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out waiting for: {expression}")
            time.sleep(0.1)

    def type(self, text: str) -> None:
        """Type into the focused element, key by key, then press Enter."""
        for char in text:
            self.send("Input.dispatchKeyEvent", type="keyDown", text=char, key=char, unmodifiedText=char)
            self.send("Input.dispatchKeyEvent", type="keyUp", key=char)
        self.send("Input.dispatchKeyEvent", type="keyDown", key="Enter", code="Enter", windowsVirtualKeyCode=13,
                  text="\r")
        self.send("Input.dispatchKeyEvent", type="keyUp", key="Enter", code="Enter", windowsVirtualKeyCode=13)

    def click(self, selector: str) -> None:
        """A real mouse click in the middle of the element."""
        box = self.evaluate(f"(() => {{ const e = document.querySelector({json.dumps(selector)}); "
                            "e.scrollIntoView(); const r = e.getBoundingClientRect(); "
                            "return [r.x + r.width / 2, r.y + r.height / 2]; })()")
        for kind in ("mousePressed", "mouseReleased"):
            self.send("Input.dispatchMouseEvent", type=kind, x=box[0], y=box[1], button="left", clickCount=1)


class Browser:
    """Headless Chromium and one websocket to its browser target."""

    def __init__(self, process: subprocess.Popen, ws: WebSocket):
        self.process, self.ws, self.next_id = process, ws, 0

    @classmethod
    def launch(cls, path: str, profile: str, timeout: float = 30, flags: tuple = ()) -> Browser:
        process = subprocess.Popen([path, *FLAGS, *flags, f"--user-data-dir={profile}", "about:blank"],
                                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        port_file = pathlib.Path(profile, "DevToolsActivePort")
        deadline = time.monotonic() + timeout
        while not (port_file.exists() and len(port_file.read_text().split()) >= 2):
            if process.poll() is not None or time.monotonic() > deadline:
                process.kill()
                raise RuntimeError(f"chromium did not start (exit status {process.poll()})")
            time.sleep(0.1)
        port, path_ = port_file.read_text().split()[:2]
        return cls(process, WebSocket(f"ws://127.0.0.1:{port}{path_}"))

    def send(self, method: str, params: dict | None = None, session: str | None = None) -> dict:
        self.next_id += 1
        message = {"id": self.next_id, "method": method, "params": params or {}}
        if session:
            message["sessionId"] = session
        self.ws.send(json.dumps(message))
        while True:
            reply = json.loads(self.ws.receive())
            if reply.get("id") == self.next_id:
                if "error" in reply:
                    raise AssertionError(f"{method}: {reply['error']}")
                return reply.get("result", {})

    def open(self, url: str) -> Page:
        target = self.send("Target.createTarget", {"url": url})["targetId"]
        session = self.send("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        return Page(self, session)

    def close(self) -> None:
        with contextlib.suppress(OSError, ConnectionError, AssertionError):
            self.send("Browser.close")
        self.ws.close()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
