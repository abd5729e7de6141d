"""Misbehaving network peers on loopback, for fault tests. All real sockets, no mocks.

* `closed_port()`      a port nobody listens on (connections are refused at once)
* `black_hole()`       an address:port that never completes the TCP handshake (connect deadline)
* `FakeServer`         accepts TCP and then sends what it is told: nothing (`silent()`), one byte
                       per second forever (`drip()`), or a fixed non-SSH greeting (`greeting()`)
* `tiny_maxstartups_sshd()`  a real sshd that drops connections past one unauthenticated one
* `SshdServer.kill_all()` (in sshd.py) kills an sshd and its sessions mid-command
"""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Iterator
from pathlib import Path

from tests.support.sshd import SshdServer, SshKeys, start_sshd


@contextlib.contextmanager
def closed_port(address: str = "127.0.0.1") -> Iterator[int]:
    """A port that refuses connections; held bound (not listening) so no one else can take it."""
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        s.bind((address, 0))
        yield int(s.getsockname()[1])
    finally:
        s.close()


@contextlib.contextmanager
def black_hole(address: str = "127.0.0.1") -> Iterator[int]:
    """A port where TCP connects hang until the client gives up, like a firewalled host.

    A listener that never accepts, with its accept queue already full: Linux then drops new SYNs
    (it does not refuse them), so the client's connect() waits for its own timeout.
    """
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    fillers: list[socket.socket] = []
    try:
        listener.bind((address, 0))
        listener.listen(0)
        port = int(listener.getsockname()[1])
        for _ in range(8):  # more than the queue holds; the extra connects are left pending
            c = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            c.setblocking(False)
            with contextlib.suppress(BlockingIOError, OSError):
                c.connect((address, port))
            fillers.append(c)
        yield port
    finally:
        for c in fillers:
            c.close()
        listener.close()


class FakeServer:
    """A TCP server on loopback; each accepted connection gets `payload`, `interval` s per byte.

    interval=None sends the payload at once; repeat=True sends it again and again (never ending).
    The connection is then held open, silent, until the server stops.
    """

    def __init__(
        self,
        payload: bytes = b"",
        interval: float | None = None,
        repeat: bool = False,
        address: str = "127.0.0.1",
    ):
        self.payload = payload
        self.interval = interval
        self.repeat = repeat
        self.address = address
        self.accepted = 0
        self._stop = threading.Event()
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._sock.bind((address, 0))
        self._sock.listen(64)
        self._sock.settimeout(0.2)
        self.port = int(self._sock.getsockname()[1])
        self._conns: list[socket.socket] = []
        self._threads: list[threading.Thread] = []
        self._acceptor = threading.Thread(target=self._accept_loop, daemon=True)

    def __enter__(self) -> FakeServer:
        self._acceptor.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self) -> None:
        self._stop.set()
        self._acceptor.join(timeout=2)
        for c in self._conns:
            with contextlib.suppress(OSError):
                c.close()
        for t in self._threads:
            t.join(timeout=2)
        self._sock.close()

    def _accept_loop(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self._sock.accept()
            except (socket.timeout, OSError):
                continue
            self.accepted += 1
            self._conns.append(conn)
            t = threading.Thread(target=self._serve, args=(conn,), daemon=True)
            self._threads.append(t)
            t.start()

    def _serve(self, conn: socket.socket) -> None:
        try:
            while not self._stop.is_set():
                if self.interval is None:
                    if self.payload:
                        conn.sendall(self.payload)
                else:
                    for i in range(len(self.payload)):
                        if self._stop.wait(self.interval):
                            return
                        conn.sendall(self.payload[i : i + 1])
                if not self.repeat:
                    break
            self._stop.wait()  # hold the connection open, saying nothing more
        except OSError:
            pass


def silent() -> FakeServer:
    """Accepts TCP, never sends an SSH banner."""
    return FakeServer(b"")


def drip(interval: float = 1.0) -> FakeServer:
    """Sends one byte per `interval` seconds, forever, never finishing a line."""
    return FakeServer(b"SSH-2.0-" + b"x" * 64, interval=interval, repeat=True)


def greeting(text: bytes = b"HTTP/1.1 400 Bad Request\r\n\r\n") -> FakeServer:
    """Answers with something that is not SSH (a web server on the SSH port)."""
    return FakeServer(text)


def tiny_maxstartups_sshd(workdir: Path, keys: SshKeys) -> SshdServer:
    """A real sshd that drops every connection beyond one in the unauthenticated phase."""
    return start_sshd(workdir, keys, extra_config={"MaxStartups": "1:100:1"}, addresses=["127.0.0.1"])
