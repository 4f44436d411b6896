"""Running the gateway under uvicorn in a background thread, for the demo,
the tests and anyone embedding it in a Python process. `chunkrag serve` is
the way to run it as a service."""

from __future__ import annotations

import socket
import threading
import time
from contextlib import contextmanager
from typing import Any, Iterator

from chunkrag_core.settings import GatewaySettings

# An idle keep-alive connection is closed after this (uvicorn's default is 5 s).
KEEP_ALIVE_S = 5


def uvicorn_options(gateway: GatewaySettings) -> dict[str, Any]:
    """What ``uvicorn.run`` / ``uvicorn.Config`` get besides the app: HTTPS
    when a certificate and key are given, and the keep-alive timeout."""
    if bool(gateway.ssl_certfile) != bool(gateway.ssl_keyfile):
        raise ValueError("HTTPS needs both CHUNKRAG_GATEWAY_SSL_CERTFILE and CHUNKRAG_GATEWAY_SSL_KEYFILE")
    options: dict[str, Any] = {"timeout_keep_alive": KEEP_ALIVE_S}
    if gateway.ssl_certfile:
        options.update(ssl_certfile=gateway.ssl_certfile, ssl_keyfile=gateway.ssl_keyfile)
    return options


@contextmanager
def serve_in_thread(app, host: str = "127.0.0.1", port: int = 0, start_timeout_s: float = 15.0, gateway: GatewaySettings | None = None) -> Iterator[str]:
    """Serve ``app`` until the block ends; yields its base URL (https:// when
    ``gateway`` names a certificate). Port 0 picks a free one (the socket is
    bound here, so there is no race for it)."""
    import uvicorn

    options = uvicorn_options(gateway or GatewaySettings())
    scheme = "https" if "ssl_certfile" in options else "http"
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="on", **options))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True, name="chunkrag-gateway")
    thread.start()
    deadline = time.monotonic() + start_timeout_s
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            server.should_exit = True
            sock.close()
            raise RuntimeError(f"the gateway did not start on {host}:{sock.getsockname()[1]} within {start_timeout_s:g} s")
        time.sleep(0.02)
    try:
        yield f"{scheme}://{host}:{sock.getsockname()[1]}"
    finally:
        server.should_exit = True
        thread.join(10)
        sock.close()
