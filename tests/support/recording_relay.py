"""A TCP relay on loopback in front of a real node: every byte goes through
unchanged both ways, and what clients sent is kept, so a test can read the
requests the node was actually sent (which headers reached it)."""

from __future__ import annotations

import socket
import threading
from contextlib import contextmanager
from typing import Iterator


class RecordingRelay:
    def __init__(self, target: tuple[str, int]):
        self.target = target
        self.sent = bytearray()
        self._lock = threading.Lock()
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        self._closed = False

    def sent_bytes(self) -> bytes:
        with self._lock:
            return bytes(self.sent)

    def serve(self) -> None:
        while not self._closed:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            upstream = socket.create_connection(self.target, timeout=30)
            threading.Thread(target=self._pump, args=(client, upstream, True), daemon=True).start()
            threading.Thread(target=self._pump, args=(upstream, client, False), daemon=True).start()

    def _pump(self, source: socket.socket, sink: socket.socket, record: bool) -> None:
        try:
            while data := source.recv(65536):
                if record:
                    with self._lock:
                        self.sent.extend(data)
                sink.sendall(data)
        except OSError:
            pass
        finally:
            for sock in (source, sink):
                try:
                    sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def close(self) -> None:
        self._closed = True
        self._listener.close()


@contextmanager
def recording_relay(host: str, port: int) -> Iterator[RecordingRelay]:
    relay = RecordingRelay((host, port))
    thread = threading.Thread(target=relay.serve, daemon=True)
    thread.start()
    try:
        yield relay
    finally:
        relay.close()
