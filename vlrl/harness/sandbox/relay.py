"""A TCP port on the host's loopback that leads to one port on a sandbox's own loopback.

A driver on the host that must speak TCP to a program in a network-isolated sandbox (ChromeDriver
to Chromium's DevTools port) connects here; each connection is carried in by the sandbox's
``connect`` (a socket opened from inside its network namespace). Traffic flows only from
connections the host opens: the sandbox still reaches nothing of the host's.
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable


class LoopbackRelay:
    def __init__(self, connect: Callable[[], socket.socket]) -> None:
        self._connect = connect
        self._server = socket.create_server(("127.0.0.1", 0))
        self.address = f"127.0.0.1:{self._server.getsockname()[1]}"
        self._closed = False
        threading.Thread(target=self._accept, name="sandbox-relay", daemon=True).start()

    def close(self) -> None:
        self._closed = True
        self._server.close()

    def _accept(self) -> None:
        while not self._closed:
            try:
                outside, _ = self._server.accept()
            except OSError:
                return
            try:
                inside = self._connect()
            except OSError:
                outside.close()
                continue
            for source, target in ((outside, inside), (inside, outside)):
                threading.Thread(target=_pump, args=(source, target), daemon=True).start()


def _pump(source: socket.socket, target: socket.socket) -> None:
    try:
        while data := source.recv(1 << 16):
            target.sendall(data)
    except OSError:
        pass
    finally:
        for sock in (source, target):
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            sock.close()
