"""A real HTTP server speaking the OpenAI chat-completions and embeddings APIs,
answering from a script: the fast stand-in for a model server in integration
tests and benches (the client, HTTP and JSON paths are all real; only the model
is scripted).

Each scripted reply is a callable ``(request_json) -> (status, body_dict)``.
"""

from __future__ import annotations

import json
import math
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Callable

Reply = Callable[[dict], tuple[int, dict]]


def completion(text: str, *, yes_probability: float | None = None, prompt_tokens: int = 50) -> Reply:
    def reply(request: dict) -> tuple[int, dict]:
        logprobs = None
        if yes_probability is not None and request.get("logprobs"):
            first = "Yes" if yes_probability >= 0.5 else "No"
            alternatives = [
                {"token": "Yes", "logprob": math.log(max(yes_probability, 1e-9)), "bytes": None},
                {"token": "No", "logprob": math.log(max(1 - yes_probability, 1e-9)), "bytes": None},
            ]
            chosen = next(a for a in alternatives if a["token"] == first)
            logprobs = {"content": [{**chosen, "top_logprobs": alternatives}]}
        body = {
            "id": "scripted",
            "object": "chat.completion",
            "created": 0,
            "model": request.get("model", "scripted"),
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": text},
                    "finish_reason": "stop",
                    "logprobs": logprobs,
                }
            ],
            "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": 1, "total_tokens": prompt_tokens + 1},
        }
        return 200, body

    return reply


def listwise_choice(marker: str, probability: float = 0.95) -> Reply:
    """A listwise judge (one output token naming a passage): the passage
    whose text holds ``marker`` gets ``probability``, "none" (0) the rest."""

    def reply(request: dict) -> tuple[int, dict]:
        prompt = request["messages"][-1]["content"]
        passages = re.findall(r"^\[(\d)\] (.*)$", prompt, flags=re.MULTILINE)
        label = next((number for number, text in passages if marker in text), "0")
        other = "0" if label != "0" else "None"  # "none": no passage gets any mass
        status, body = completion(label)(request)
        alternatives = [
            {"token": label, "logprob": math.log(probability), "bytes": None},
            {"token": other, "logprob": math.log(1 - probability), "bytes": None},
        ]
        body["choices"][0]["logprobs"] = {"content": [{**alternatives[0], "top_logprobs": alternatives}]}
        return status, body

    return reply


def is_listwise(request: dict) -> bool:
    return "Which passage answers the question?" in request["messages"][-1]["content"]


def error(status: int, message: str = "scripted failure") -> Reply:
    return lambda request: (status, {"error": {"message": message, "type": "scripted", "code": status}})


class ScriptedOpenAI:
    """Serves scripted replies in order on 127.0.0.1 (a free port); records
    the requests it received. Use as a context manager."""

    def __init__(self, replies: list[Reply] | None = None, default: Reply | None = None):
        self.replies = list(replies or [])
        self.default = default
        self.requests: list[dict] = []
        self.headers: list[dict[str, str]] = []  # of each request, names lower-cased
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}/v1"

    def _next(self, request: dict) -> tuple[int, dict]:
        with self._lock:
            self.requests.append(request)
            reply = self.replies.pop(0) if self.replies else self.default
        if reply is None:
            return 500, {"error": {"message": "script exhausted"}}
        return reply(request)

    def _handler(self):
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802 (http.server's naming)
                length = int(self.headers.get("Content-Length", 0))
                request = json.loads(self.rfile.read(length) or b"{}")
                with outer._lock:
                    outer.headers.append({name.lower(): value for name, value in self.headers.items()})
                status, body = outer._next(request)
                payload = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def log_message(self, *args):
                pass

        return Handler

    def __enter__(self) -> ScriptedOpenAI:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._server.shutdown()
        self._server.server_close()


def embeddings(dims: int = 384, latency_s: tuple[float, float] = (0.0, 0.0)) -> Reply:
    """An OpenAI-compatible /embeddings endpoint: each input becomes its
    words hashed into ``dims`` buckets (texts sharing words are similar, as
    with a real model), after a pause drawn uniformly from ``latency_s``
    per request, like a remote model server's. The pause is drawn from the
    request's own text, so a run is repeatable."""
    import base64
    import hashlib
    import random
    import struct
    import time

    def vector(text: str) -> list[float]:
        row = [0.0] * dims
        for word in re.findall(r"\w+", text.lower()):
            digest = hashlib.blake2b(word.encode(), digest_size=8).digest()
            bucket = int.from_bytes(digest[:4], "little") % dims
            row[bucket] += 1.0 if digest[4] & 1 else -1.0
        norm = math.sqrt(sum(v * v for v in row)) or 1.0
        return [v / norm for v in row]

    def reply(request: dict) -> tuple[int, dict]:
        inputs = request.get("input", [])
        inputs = [inputs] if isinstance(inputs, str) else list(inputs)
        low, high = latency_s
        if high > 0:
            seed = int.from_bytes(hashlib.blake2b("\x00".join(inputs).encode(), digest_size=8).digest(), "little")
            time.sleep(random.Random(seed).uniform(low, high))
        # The openai client asks for base64 (float32, little-endian) unless told
        # otherwise, as hosted servers answer; plain lists are for the others.
        if request.get("encoding_format") == "base64":
            encode = lambda row: base64.b64encode(struct.pack(f"<{dims}f", *row)).decode()  # noqa: E731
        else:
            encode = lambda row: row  # noqa: E731
        data = [{"object": "embedding", "index": i, "embedding": encode(vector(t))} for i, t in enumerate(inputs)]
        usage = {"prompt_tokens": sum(len(t.split()) for t in inputs), "total_tokens": 0}
        return 200, {"object": "list", "data": data, "model": request.get("model", "scripted"), "usage": usage}

    return reply
