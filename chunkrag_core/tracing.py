"""Traces, with OpenTelemetry: off unless ``CHUNKRAG_OTEL_EXPORTER`` names an
exporter (``console``, or ``otlp`` with the opentelemetry-exporter-otlp-proto-http
package installed). Off, every call here returns at once: the SDK is not
imported, no span is made, no header is added.

On, a filtered search is one trace: the gateway's request span (a child of
the caller's ``traceparent`` when it sent one), the search engine calls, the
Celery task that judged a batch (its ``traceparent`` travels in the task's
message headers and is read back in the worker), and each model call. The
W3C ``traceparent`` goes with every request to the cluster and the model
server too, so their own traces join.

The tracer provider is this module's own, never OpenTelemetry's global one:
a library that sets the global provider (or the elasticsearch client, which
traces through it) is left as it is. One provider per process, made by
``configure``; a forked worker process makes its own (``ensure_from_env``).
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

EXPORTER_VARIABLE = "CHUNKRAG_OTEL_EXPORTER"
EXPORTERS = ("none", "console", "otlp")

# (tracer, provider, pid) once configured; None: tracing is off.
_state: tuple[Any, Any, int] | None = None


class TracingError(ValueError):
    """A tracing setting the process cannot honour."""


def active() -> bool:
    return _state is not None


def configure(exporter: str = "none", *, span_processor=None, service_name: str = "chunkrag") -> bool:
    """Turn tracing on for this process with ``exporter`` (one of EXPORTERS),
    or with ``span_processor`` (tests: an in-memory exporter's). ``none``
    and no processor turn it off. True when on."""
    global _state
    if exporter not in EXPORTERS:
        raise TracingError(f"{EXPORTER_VARIABLE} must be one of {', '.join(EXPORTERS)}, got {exporter!r}")
    if exporter == "none" and span_processor is None:
        shutdown()
        return False
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter

    processor = span_processor
    if processor is None:
        processor = BatchSpanProcessor(ConsoleSpanExporter() if exporter == "console" else _otlp_exporter())
    shutdown()
    provider = TracerProvider(resource=Resource.create({"service.name": service_name}))
    provider.add_span_processor(processor)
    _state = (provider.get_tracer("chunkrag"), provider, os.getpid())
    return True


def _otlp_exporter():
    try:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    except ImportError:
        raise TracingError(
            f"{EXPORTER_VARIABLE}=otlp needs the OTLP exporter: pip install opentelemetry-exporter-otlp-proto-http "
            "(its endpoint is read from OpenTelemetry's own OTEL_EXPORTER_OTLP_* variables)"
        ) from None
    return OTLPSpanExporter()


def exporter_from_env(environ: Mapping[str, str] | None = None) -> str:
    """CHUNKRAG_OTEL_EXPORTER (``none`` when unset), checked against EXPORTERS:
    what ``configure_from_env`` starts with, and what `chunkrag config check` checks."""
    env = os.environ if environ is None else environ
    exporter = (env.get(EXPORTER_VARIABLE) or "none").strip().lower()
    if exporter not in EXPORTERS:
        raise TracingError(f"{EXPORTER_VARIABLE} must be one of {', '.join(EXPORTERS)}, got {exporter!r}")
    return exporter


def configure_from_env(environ: Mapping[str, str] | None = None, service_name: str = "chunkrag") -> bool:
    return configure(exporter_from_env(environ), service_name=service_name)


def ensure_from_env(service_name: str) -> None:
    """In a process that may have been forked from a configured one (a
    Celery pool process): configure from the environment unless this very
    process already did. Cheap once done."""
    if _state is not None and _state[2] == os.getpid():
        return
    if _state is None and not os.environ.get(EXPORTER_VARIABLE):
        return
    configure_from_env(service_name=service_name)


def shutdown() -> None:
    """Export what is pending and turn tracing off."""
    global _state
    if _state is not None:
        _, provider, pid = _state
        _state = None
        if pid == os.getpid():
            provider.shutdown()


@contextmanager
def span(name: str, kind: str = "internal", attributes: Mapping[str, Any] | None = None, parent=None) -> Iterator[Any]:
    """A span around the block, the current one's child (or ``parent``'s, a
    context from ``extract``); yields it (None when tracing is off)."""
    if _state is None:
        yield None
        return
    from opentelemetry.trace import SpanKind

    with _state[0].start_as_current_span(
        name, context=parent, kind=getattr(SpanKind, kind.upper()), attributes=dict(attributes or {})
    ) as current:
        yield current


def set_attributes(current, attributes: Mapping[str, Any]) -> None:
    """Attributes learnt during the span (a status, token counts); None values are left out."""
    if current is not None:
        current.set_attributes({name: value for name, value in attributes.items() if value is not None})


def headers() -> dict[str, str]:
    """``traceparent`` (and ``tracestate``) of the current span, for a request
    or task message that continues the trace; empty when tracing is off."""
    if _state is None:
        return {}
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    carrier: dict[str, str] = {}
    TraceContextTextMapPropagator().inject(carrier)
    return carrier


def extract(carrier: Mapping[str, str] | None):
    """The context a ``traceparent`` in ``carrier`` names (None when tracing is
    off or there is none): the parent of the next span."""
    if _state is None or not carrier or "traceparent" not in carrier:
        return None
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    return TraceContextTextMapPropagator().extract(dict(carrier))
