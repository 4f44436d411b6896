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


def uvicorn_options(gateway: GatewaySettings, metrics=None) -> dict[str, Any]:
    """What ``uvicorn.run`` / ``uvicorn.Config`` get besides the app: HTTPS
    when a certificate and key are given, the keep-alive timeout, and the
    protocol that bounds what a client connection may hold (header timeout,
    connection caps, header sizes: ``connections.py``). Each call makes a
    protocol class with its own connection counts: one call per server.
    ``metrics`` (the app's ``GatewayMetrics``) reads those counts at scrape time."""
    from chunkrag_gateway.connections import ConnectionLimits, protocol_class

    if bool(gateway.ssl_certfile) != bool(gateway.ssl_keyfile):
        raise ValueError("HTTPS needs both CHUNKRAG_GATEWAY_SSL_CERTFILE and CHUNKRAG_GATEWAY_SSL_KEYFILE")
    for name in ("header_timeout_s", "keep_alive_s", "max_connections", "max_header_bytes", "max_header_line_bytes"):
        if getattr(gateway, name) <= 0:
            raise ValueError(f"CHUNKRAG_GATEWAY_{name.upper()} must be positive, got {getattr(gateway, name)}")
    protocol = protocol_class(ConnectionLimits.from_settings(gateway))
    if metrics is not None:
        from chunkrag_gateway.telemetry import ConnectionCollector

        metrics.watch(ConnectionCollector(protocol.counts, metrics.cut_short))
    # uvicorn takes the client address from X-Forwarded-For when the peer is
    # 127.0.0.1 unless told not to; the address keys the rate limit of callers
    # without credentials, so it is read from a header only behind a trusted proxy.
    options: dict[str, Any] = {
        "timeout_keep_alive": gateway.keep_alive_s,
        "http": protocol,
        "proxy_headers": gateway.trusted_proxy,
    }
    if gateway.ssl_certfile:
        options.update(ssl_certfile=gateway.ssl_certfile, ssl_keyfile=gateway.ssl_keyfile)
    return options


@contextmanager
def serve_in_thread(
    app, host: str = "127.0.0.1", port: int = 0, start_timeout_s: float = 15.0, gateway: GatewaySettings | None = None
) -> Iterator[str]:
    """Serve ``app`` until the block ends; yields its base URL (https:// when
    ``gateway``, by default the app's gateway settings, names a certificate).
    Port 0 picks a free one (the socket is bound here, so there is no race
    for it)."""
    import uvicorn

    # The app's own gateway settings unless others are given.
    state = getattr(app, "state", None)
    edges = getattr(state, "edges", None)
    options = uvicorn_options(
        gateway or (edges.settings.gateway if edges is not None else GatewaySettings()),
        getattr(state, "metrics", None),
    )
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
            raise RuntimeError(
                f"the gateway did not start on {host}:{sock.getsockname()[1]} within {start_timeout_s:g} s"
            )
        time.sleep(0.02)
    # Ready means the models are read too (health says so): within what is
    # left of the start timeout; a slower load only leaves health at 503.
    if edges is not None:
        edges.wait_for_models(deadline - time.monotonic())
    try:
        yield f"{scheme}://{host}:{sock.getsockname()[1]}"
    finally:
        server.should_exit = True
        thread.join(10)
        sock.close()
