"""The operator's replicas as the harness sees them: the one webhook address in front of them all,
a process's state, and the fault hook a scenario needs."""

from __future__ import annotations

import contextlib
import itertools
import socket
import threading
from collections import Counter
from collections.abc import Callable
from pathlib import Path


class WebhookFront:
    """What the webhook Service is to the operator's replicas in a cluster: one address, which
    every replica registers as its webhooks' URL (so the registration stays the same whichever
    replica made it last, and across restarts), passed on as TCP (TLS ends at the replica, whose
    certificate all share through their Secret) to a replica that takes the connection, tried in
    turn from ``ports()``. With none up the API server's call fails, and with failurePolicy Fail
    so does the create or update it was for."""

    def __init__(self, ports: Callable[[], list[int]]) -> None:
        self.ports = ports
        self._server = socket.create_server(("127.0.0.1", 0))
        self._server.settimeout(0.5)
        self.port = int(self._server.getsockname()[1])
        self.stats: Counter[str] = Counter()
        self._turn = itertools.count()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._accept, name="webhook-front", daemon=True)

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    def start(self) -> WebhookFront:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(5)
        self._server.close()

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self._server.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            threading.Thread(target=self._serve, args=(conn,), name="webhook-front-conn", daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        ports = self.ports()
        start = next(self._turn)
        upstream = None
        for i in range(len(ports)):
            try:
                upstream = socket.create_connection(("127.0.0.1", ports[(start + i) % len(ports)]), timeout=2)
                break
            except OSError:
                continue
        if upstream is None:
            self.stats["no replica"] += 1
            conn.close()
            return
        self.stats["passed on"] += 1
        upstream.settimeout(None)
        other = threading.Thread(target=self._pump, args=(upstream, conn), daemon=True)
        other.start()
        self._pump(conn, upstream)
        other.join(30)
        for sock in (conn, upstream):
            sock.close()

    @staticmethod
    def _pump(source: socket.socket, sink: socket.socket) -> None:
        try:
            while data := source.recv(65536):
                sink.sendall(data)
        except OSError:
            pass
        with contextlib.suppress(OSError):
            sink.shutdown(socket.SHUT_WR)


def process_state(pid: int) -> str:
    """The state letter of /proc/<pid>/stat ('T' when stopped); '' when gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return ""
    return text.rpartition(")")[2].split()[0]


class HookMissing(AssertionError):
    """The operator does not have the fault hook a scenario needs."""
