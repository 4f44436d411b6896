"""The code examples of README.md and docs/*.md, run against the real
services: each ```python and ```sh block is marked, on the line before it, with
what this test does with it:

- ``<!-- example: run -->``: run as written (Python in this process, a shell
  block with bash in a directory holding the checkout's ``.venv`` and ``docs``);
- ``<!-- example: run with the gateway -->``: run with a gateway this test
  starts on Elasticsearch (``... on opensearch``: on OpenSearch); its address
  stands for ``http://127.0.0.1:8400``, and a block that uses ``es`` without
  making it gets a client of that gateway;
- ``<!-- example: not run: <why> -->``: not run, for the reason given (a
  cluster or a key of the reader's own, a command that starts or stops the
  services or keeps running, data this checkout does not hold).

The indices the examples name (``handbook``, ``kb-existing``) are made here
with names of their own, which stand for them in every block. A block without
a marker fails ``test_every_example_is_marked``: each new example says what
is done with it."""

from __future__ import annotations

import dataclasses
import os
import re
import subprocess
import uuid
from pathlib import Path

import pytest

from chunkrag_core.engines import make_backend
from chunkrag_core.settings import DEFAULT_SCALES
from chunkrag_gateway import create_app
from chunkrag_gateway.server import serve_in_thread
from ingest_pipeline.pipeline import ingest_documents
from ingest_pipeline.sources import plain_document
from tests.support.model_speed import budgeted

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
LANGUAGES = ("python", "sh")
MARKER = re.compile(r"<!-- example: (?P<what>[^>]*?) -->")
FENCE = re.compile(r"^```(?P<language>\w*)[^\n]*\n(?P<code>.*?)^```", re.S | re.M)
GATEWAY_ADDRESS = "http://127.0.0.1:8400"
# The longest a shell example may run (a search, an answer from the local model on a busy machine).
SHELL_TIMEOUT_S = 900

# The handbook the examples search: short pages that hold what they ask about.
HANDBOOK = {
    "api-keys": (
        "Rotating API keys",
        "Rotate the API keys every ninety days. To rotate an API key, create a new key in the admin console, "
        "deploy it to every service, then revoke the old key. Never share an API key by email.",
    ),
    "bees": (
        "How bees make honey",
        "Bees make honey from the nectar of flowers. A forager bee drinks nectar and stores it in its honey "
        "stomach. Back at the hive, house bees pass the nectar from mouth to mouth, adding enzymes, and fan it "
        "with their wings until most of its water has evaporated. Then they seal the honey in wax cells.",
    ),
    "lunch": ("Lunch", "The canteen serves lunch from noon to two. Soup is served on Fridays."),
}
# The index of one's own that the post-search examples search (kb-existing).
KB = [
    {
        "title": "Rotating an API key",
        "body": "To rotate an API key, open the security settings and create a second key. Switch every client "
        "to the new key, then delete the old one. Keys older than a year are disabled.",
        "category": "security",
        "year": 2024,
    },
    {
        "title": "API key scopes",
        "body": "An API key can be limited to some indices. A key that only reads cannot write. "
        "Rotate keys that were shared by mistake at once.",
        "category": "security",
        "year": 2023,
    },
    {
        "title": "Holidays",
        "body": "The office is closed between Christmas and the new year.",
        "category": "office",
        "year": 2024,
    },
]


@dataclasses.dataclass(frozen=True)
class Example:
    page: Path
    line: int
    language: str
    code: str
    what: str | None  # the marker's text, None without one

    @property
    def name(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}"


def examples() -> list[Example]:
    found = []
    for page in PAGES:
        text = page.read_text(encoding="utf-8")
        for fence in FENCE.finditer(text):
            if fence["language"] not in LANGUAGES:
                continue
            before = text[: fence.start()].rstrip("\n").rsplit("\n", 1)[-1]
            marker = MARKER.fullmatch(before.strip())
            line = text[: fence.start()].count("\n") + 1
            found.append(Example(page, line, fence["language"], fence["code"], marker["what"] if marker else None))
    return found


EXAMPLES = examples()
RUN = [e for e in EXAMPLES if e.what is not None and not e.what.startswith("not run")]


def test_every_example_is_marked():
    unmarked = [e.name for e in EXAMPLES if e.what is None]
    assert not unmarked, f"mark each with <!-- example: run | run with the gateway | not run: why -->: {unmarked}"
    kinds = {e.what for e in EXAMPLES if not e.what.startswith("not run: ")}
    assert kinds <= {"run", "run with the gateway", "run with the gateway on opensearch"}, kinds
    assert all(len(e.what) > len("not run: ") + 10 for e in EXAMPLES if e.what.startswith("not run")), "say why"
    assert RUN, "no example runs"


@pytest.fixture(scope="module")
def names():
    suffix = uuid.uuid4().hex[:8]
    return {"handbook": f"docs-examples-handbook-{suffix}", "kb-existing": f"docs-examples-kb-{suffix}"}


def _ingest_handbook(settings, embedder, backend, index: str) -> None:
    # At the ensemble's scales too: one example searches them.
    scaled = dataclasses.replace(settings, chunking=dataclasses.replace(settings.chunking, scales=DEFAULT_SCALES))
    documents = [plain_document(doc_id, text, doc_id, title=title) for doc_id, (title, text) in HANDBOOK.items()]
    ingest_documents(documents, client=backend, embedder=embedder, settings=scaled, index=index, progress=False)


@pytest.fixture(scope="module")
def elasticsearch_indices(settings, embedder, es, names):
    _ingest_handbook(settings, embedder, es, names["handbook"])
    kb = names["kb-existing"]
    es.client.indices.create(
        index=kb,
        mappings={
            "properties": {
                "title": {"type": "text"},
                "body": {"type": "text"},
                "category": {"type": "keyword"},
                "year": {"type": "integer"},
            }
        },
    )
    for n, document in enumerate(KB):
        es.client.index(index=kb, id=str(n), document=document)
    es.client.indices.refresh(index=kb)
    yield names
    es.client.indices.delete(index=f"{names['handbook']},{kb}", ignore_unavailable=True)


@pytest.fixture(scope="module")
def answering(settings, local_model):
    """The settings with the model's timeout sized from its speed now, for an
    answer from a prompt filling its context window (``model_speed.py``)."""
    return dataclasses.replace(
        settings, chat=budgeted(local_model, prompt_tokens=local_model.context_tokens, completion_tokens=256)
    )


@pytest.fixture(scope="module")
def gateway(answering, embedder, elasticsearch_indices):
    # Writes forwarded too, as docs/frameworks.md starts it: a framework's store writes through it.
    writing = dataclasses.replace(answering, gateway=dataclasses.replace(answering.gateway, passthrough="read,write"))
    with serve_in_thread(create_app(writing, embedder=embedder)) as url:
        yield url


@pytest.fixture(scope="module")
def opensearch_gateway(answering, embedder, names):
    on_opensearch = dataclasses.replace(answering, search_backend="opensearch")
    backend = make_backend(on_opensearch)
    _ingest_handbook(on_opensearch, embedder, backend, names["handbook"])
    try:
        with serve_in_thread(create_app(on_opensearch, embedder=embedder)) as url:
            yield url
    finally:
        backend.delete_index(names["handbook"])


def rendered(example: Example, names: dict[str, str], url: str | None) -> str:
    """The example's code with this test's indices (and gateway) in place of the ones it names."""
    code = example.code
    for name, ours in names.items():
        code = re.sub(rf"\b{re.escape(name)}\b", ours, code)
    return code.replace(GATEWAY_ADDRESS, url) if url else code


@pytest.mark.parametrize("example", RUN, ids=lambda e: e.name)
def test_the_example_runs(example: Example, request, names, elasticsearch_indices, tmp_path, capsys):
    url = None
    if example.what == "run with the gateway":
        url = request.getfixturevalue("gateway")
    elif example.what == "run with the gateway on opensearch":
        url = request.getfixturevalue("opensearch_gateway")
    code = rendered(example, names, url)
    if example.language == "python":
        namespace: dict = {"__name__": "__example__"}
        if url is not None and not re.search(r"^es = ", code, re.M):
            from elasticsearch import Elasticsearch

            namespace["es"] = Elasticsearch(url, request_timeout=SHELL_TIMEOUT_S)
        exec(compile(code, example.name, "exec"), namespace)  # noqa: S102 - the docs' own example
        printed = capsys.readouterr().out
        if "print(" in code:
            assert printed.strip(), f"{example.name} printed nothing"
        return
    answering = request.getfixturevalue("answering")
    for entry in (".venv", "docs"):
        (tmp_path / entry).symlink_to(ROOT / entry)
    # A body of one's own, for the examples that take one (--body my-query.json).
    (tmp_path / "my-query.json").write_text('{"query": {"match": {"body": "rotate an API key"}}, "size": 3}')
    run = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", code],
        cwd=tmp_path,
        # The model's timeout sized from its speed now, as the gateway's.
        env={**os.environ, "CHUNKRAG_CONFIG": "none", "CHUNKRAG_CHAT_TIMEOUT_S": str(answering.chat.timeout_s)},
        capture_output=True,
        text=True,
        timeout=SHELL_TIMEOUT_S,
    )
    assert run.returncode == 0, f"{example.name} exited {run.returncode}:\n{run.stdout[-2000:]}\n{run.stderr[-2000:]}"
