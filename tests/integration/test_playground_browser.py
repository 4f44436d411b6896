"""The playground page in a real browser: Debian's chromium, headless, driven
by Playwright (pointed at that executable; Playwright's own browser download
is never used). The gateway runs over real HTTP in front of the secured
Elasticsearch node (forward mode, file-realm users), the open node with a
gateway API key (service mode), and OpenSearch; the scripted model server
writes the answers.

Each view is checked against the API's own JSON for the same request, the
body taken from the page's "copy as" panel. Screenshots land in
tests/output/playground/ (gitignored); docs/images/ holds copies of the main
views. Without chromium or Playwright these tests fail, saying why."""

from __future__ import annotations

import contextlib
import dataclasses
import io
import json
import os
import re
import shutil
import subprocess
import uuid
from pathlib import Path

import httpx
import pytest

from chunkrag_core.engines import make_backend
from chunkrag_core.providers.chat import OpenAICompatibleChat
from chunkrag_gateway import create_app
from chunkrag_gateway.identity import basic, key_hash
from chunkrag_gateway.playground import CSP, PAGE
from chunkrag_gateway.server import serve_in_thread as serving
from ingest_pipeline.pipeline import ingest_documents
from ingest_pipeline.sources import plain_document
from local_services.scripted_openai import ScriptedOpenAI
from tests.integration.test_gateway import DOCS, QUESTION, by_content
from tests.support import secured_elasticsearch as secured

pytestmark = pytest.mark.integration

ARTIFACTS = Path(__file__).resolve().parents[1] / "output" / "playground"
INJECTED = "<script>window.__pwned = true</script>"
PLAYGROUND_DOCS = {
    **DOCS,
    "notice": f"The Tokyo office notice reads {INJECTED} and nothing else. Visitors sign in at the front desk.",
    "osaka": "Osaka is a large port city in Japan. It is known for its food. Osaka Castle is a famous landmark.",
}
QUERY_SET = [
    {"question": QUESTION, "answers": ["Tokyo"]},
    {"question": "Which city was the imperial capital of Japan?", "answers": ["Kyoto"]},
    {"question": "How many strings does a violin have?", "answers": ["four strings", "4"]},
    {"question": "How many people live in the Tokyo metropolitan area?", "answers": ["37 million"]},
    {"question": "What is the violin played with?", "answers": ["a bow"]},
    {"question": "Who composed the Moonlight Sonata?", "answers": ["Beethoven"]},  # in no document
]
# Redis db 12: the score cache of these tests only.
CACHE_DB = 12
TIMEOUT_MS = 120_000


# --- the browser -------------------------------------------------------------


@pytest.fixture(scope="session")
def chromium() -> str:
    path = shutil.which("chromium") or shutil.which("chromium-browser")
    if path is None:
        pytest.fail(
            "no chromium on this machine: the playground's browser tests need Debian's chromium package "
            "(`make browser-setup` installs it with apt-get)",
            pytrace=False,
        )
    return path


# Module scope, not session: Playwright's sync API keeps an event loop running in this thread while it
# is open, and tests after this module call asyncio.run().
@pytest.fixture(scope="module")
def browser(chromium):
    try:
        from playwright.sync_api import sync_playwright
    except ImportError as exc:
        pytest.fail(
            f"Playwright for Python is not installed ({exc}): `make setup` installs the dev dependencies", pytrace=False
        )
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as playwright:
        try:
            launched = playwright.chromium.launch(executable_path=chromium, headless=True)
        except Exception as exc:  # noqa: BLE001 - whatever kept it from starting is the reason to report
            pytest.fail(f"chromium at {chromium} did not start under Playwright: {exc}", pytrace=False)
        yield launched
        launched.close()


@pytest.fixture
def page(browser):
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    opened = context.new_page()
    opened.set_default_timeout(TIMEOUT_MS)
    problems: list[str] = []
    opened.on("pageerror", lambda error: problems.append(f"page error: {error}"))
    opened.on(
        "console",
        lambda message: problems.append(f"console {message.type}: {message.text}") if message.type == "error" else None,
    )
    yield opened
    context.close()
    # A CSP violation or a script error shows here: the page must have none.
    assert not [p for p in problems if "401" not in p and "403" not in p], problems


def shot(target, name: str, **options) -> Path:
    path = ARTIFACTS / f"{name}.png"
    target.screenshot(path=str(path), **options)
    return path


def open_page(page, gateway: str):
    response = page.goto(gateway + PAGE)
    assert response.status == 200
    assert response.headers["content-security-policy"] == CSP
    page.wait_for_selector("body[data-ready=true]")
    return response


def sign_in(page, *, user: str | None = None, password: str = "", api_key: str | None = None) -> None:
    if user is not None:
        page.select_option("#auth-scheme", "basic")
        page.fill("#auth-user", user)
        page.fill("#auth-password", password)
    elif api_key is not None:
        page.select_option("#auth-scheme", "apikey")
        page.fill("#auth-key", api_key)
    else:
        page.select_option("#auth-scheme", "none")
    page.click("#sign-in")


def listed_indices(page) -> list[str]:
    page.wait_for_selector("#workspace:not([hidden])")
    return page.eval_on_selector_all("#index option", "options => options.map(o => o.value)")


def run(page, button: str) -> None:
    """Click ``button`` and wait until its requests are answered."""
    before = page.evaluate("Number(document.body.dataset.runs || 0)")
    page.click(button)
    # A selector, not wait_for_function: the page's CSP (no eval) refuses Playwright's predicate.
    page.wait_for_selector(f"body[data-runs='{before + 1}'][data-busy=false]")
    error = page.text_content("#error")
    assert not error, error


def ask(page, index: str, question: str) -> None:
    page.select_option("#index", index)
    page.fill("#question", question)
    run(page, "#ask")


def copied(page, fmt: str, side: str = "A") -> str:
    page.select_option("#copy-side", side)
    page.click(f".tab[data-copy='{fmt}']")
    return page.text_content("#copy-text")


def page_rows(page, table: str = "#candidates") -> list[dict]:
    return page.eval_on_selector_all(f"{table} tbody tr", "rows => rows.map(r => ({...r.dataset}))")


def api_decisions(response: dict) -> list[tuple[str, str, str]]:
    """(id, kept, reason) of every candidate in retrieval order, from the API's JSON."""
    hits = response["hits"]["hits"] + response["chunkrag"].get("dropped", [])
    hits.sort(key=lambda hit: hit["_chunkrag"]["retrieval_rank"])
    return [(hit["_id"], str(hit["_chunkrag"]["kept"]).lower(), hit["_chunkrag"]["reason"]) for hit in hits]


def api_search(gateway: str, index: str, body: dict, authorization: str | None = None) -> dict:
    headers = {"authorization": authorization} if authorization else {}
    response = httpx.post(f"{gateway}/{index}/_search", json=body, headers=headers, timeout=120)
    assert response.status_code == 200, response.text
    return response.json()


def assert_page_matches_api(page, gateway: str, index: str, authorization: str | None = None) -> dict:
    """The candidates, decisions and threshold the page shows are the API's
    for the exact body the page says it sent."""
    body = json.loads(copied(page, "body"))
    assert body["ext"]["chunkrag"]["include_dropped"] is True
    expected = api_search(gateway, index, body, authorization)
    shown = [(row["id"], row["kept"], row["reason"]) for row in page_rows(page)]
    assert shown == api_decisions(expected)
    threshold = expected["chunkrag"]["threshold"]
    shown_threshold = page.get_attribute("#result", "data-threshold")
    assert (float(shown_threshold) if shown_threshold else None) == (threshold["value"] if threshold else None)
    return expected


# --- the services --------------------------------------------------------------


@pytest.fixture(scope="module")
def model_server():
    with ScriptedOpenAI(default=by_content) as server:
        yield server


@pytest.fixture(scope="module")
def chat(model_server):
    return OpenAICompatibleChat(model="scripted", base_url=model_server.base_url, timeout_s=10)


def own_cache(settings):
    import redis

    chosen = settings.redis_url.rsplit("/", 1)[0] + f"/{CACHE_DB}"
    redis.Redis.from_url(chosen).flushdb()
    return chosen


def documents(docs=PLAYGROUND_DOCS):
    return [plain_document(doc_id, text, doc_id, title=doc_id.capitalize()) for doc_id, text in docs.items()]


@pytest.fixture(scope="session")
def secured_node_for_playground():
    # Session-long, like test_gateway_secured's: the node starts once per run at most.
    with secured.secured_node() as node:
        yield node


@pytest.fixture(scope="module")
def secured_indices(secured_node_for_playground, embedder, settings):
    from elasticsearch import Elasticsearch

    from chunkrag_core.engines.elasticsearch import ElasticsearchBackend

    admin = Elasticsearch(secured.url_for(secured.ADMIN), request_timeout=60)
    suffix = uuid.uuid4().hex[:8]
    allowed, other = f"{secured.ALLOWED_PREFIX}play-{suffix}", f"{secured.OTHER_PREFIX}play-{suffix}"
    for name in (allowed, other):
        ingest_documents(
            documents(),
            client=ElasticsearchBackend(admin),
            embedder=embedder,
            settings=settings,
            index=name,
            progress=False,
        )
    yield allowed, other
    admin.indices.delete(index=f"{allowed},{other}", ignore_unavailable=True)
    admin.close()


@pytest.fixture(scope="module")
def forward_gateway(settings, embedder, chat, secured_indices):
    """Forward mode: each request reaches the secured node with the
    credentials typed into the page; the gateway's own are for its health probe."""
    chosen = dataclasses.replace(settings, es_url=secured.url_for(secured.SERVICE), redis_url=own_cache(settings))
    with serving(create_app(chosen, model=chat, embedder=embedder)) as url:
        yield url


ALICE = basic(secured.READER.name, secured.READER.password).decode()


# --- forward mode, the secured node ------------------------------------------------


def test_sign_in_lists_only_what_the_user_may_read_and_keeps_no_credentials(page, forward_gateway, secured_indices):
    allowed, other = secured_indices
    open_page(page, forward_gateway)
    sign_in(page, user=secured.READER.name, password="not-the-password")
    page.wait_for_selector("#login-error:has-text('Sign-in failed')")
    shot(page, "sign_in", clip={"x": 0, "y": 0, "width": 1280, "height": 250})
    assert "401" in page.text_content("#login-error")
    assert page.is_hidden("#workspace")

    sign_in(page, user=secured.READER.name, password=secured.READER.password)
    names = listed_indices(page)
    assert allowed in names and other not in names
    assert all(name.startswith(secured.ALLOWED_PREFIX) for name in names)
    # Described with the user's own credentials (_field_caps): a chunk index.
    assert page.get_attribute(f"#index option[value='{allowed}']", "data-kind") == "chunks"
    stored = page.evaluate(
        "({local: localStorage.length, session: sessionStorage.length, cookie: document.cookie, url: location.href})"
    )
    assert stored == {"local": 0, "session": 0, "cookie": "", "url": forward_gateway + PAGE}
    assert page.input_value("#auth-password") == ""


def credentials_env(snippet: str) -> dict[str, str]:
    """The user and password for the two variables the snippet reads, in its order."""
    names = list(dict.fromkeys(re.findall(r'(?:\$|os\.environ\[")([A-Z][A-Z_]+)', snippet)))
    assert len(names) == 2, names
    return dict(zip(names, (secured.READER.name, secured.READER.password)))


def run_snippet(snippet: str, monkeypatch) -> str:
    for name, value in credentials_env(snippet).items():
        monkeypatch.setenv(name, value)
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        exec(compile(snippet, "copied snippet", "exec"), {})  # noqa: S102 - the page's own output, run as a user would
    return printed.getvalue()


def test_ask_shows_the_apis_candidates_decisions_threshold_and_answer(
    page, forward_gateway, secured_indices, monkeypatch
):
    allowed, _ = secured_indices
    open_page(page, forward_gateway)
    sign_in(page, user=secured.READER.name, password=secured.READER.password)
    listed_indices(page)
    ask(page, allowed, QUESTION)
    expected = assert_page_matches_api(page, forward_gateway, allowed, ALICE)

    threshold = expected["chunkrag"]["threshold"]
    assert f"{threshold['value']:.3f} ({threshold['method']})" in page.text_content("#fact-threshold")
    # The chart: one bar per candidate and the threshold line.
    assert page.locator("#chart rect.bar").count() == len(api_decisions(expected))
    assert page.locator("#chart line.threshold").count() == 1
    # The answer, its citations linking to the chunks.
    answer = expected["chunkrag"]["answer"]
    assert page.text_content("#answer-text") == answer["text"]
    cited = page.eval_on_selector_all("#answer .citation", "links => links.map(l => l.dataset.chunk)")
    assert cited == answer["citations"] and cited
    page.click("#answer .citation")
    assert page.get_attribute("#candidates tr.focus", "data-id") == cited[0]
    shot(page.locator("#result"), "ask")
    shot(page.locator("#query"), "settings")

    # A chunk's neighbours in its document, through a plain _search.
    page.click(f"#candidates tr[data-id='{cited[0]}']")
    page.wait_for_selector("#neighbours[data-loaded=true] li.self")
    doc_id = cited[0].split(":")[0]
    neighbours = page.eval_on_selector_all("#neighbours li", "items => items.map(i => i.dataset.id)")
    assert cited[0] in neighbours and all(n.startswith(doc_id + ":") for n in neighbours)
    # The segment it would extend to: the API's, for the same search with segments on.
    body = json.loads(copied(page, "body"))
    body["ext"]["chunkrag"].update(segments=True, answer=False, include_dropped=False)
    segments = api_search(forward_gateway, allowed, body, ALICE)["hits"]["hits"]
    holding = [hit for hit in segments if cited[0] in hit["_chunkrag"]["chunk_ids"]]
    assert page.get_attribute("#segment", "data-segment") == (holding[0]["_id"] if holding else "")
    in_segment = page.eval_on_selector_all("#neighbours li.in-segment", "items => items.map(i => i.dataset.id)")
    assert set(in_segment) == set(holding[0]["_chunkrag"]["chunk_ids"] if holding else ()) & set(neighbours)
    shot(page.locator("#neighbours"), "neighbours_default_filter")

    # The copy-as panel: the same body in every form, with no credentials in it.
    body = json.loads(copied(page, "body"))
    curl = copied(page, "curl")
    assert f"{forward_gateway}/{allowed}/_search" in curl and '"$ES_USER:$ES_PASSWORD"' in curl
    assert json.loads(curl.split("-d '", 1)[1].rsplit("'", 1)[0]) == body
    python_es = copied(page, "python-es")
    assert "from elasticsearch import Elasticsearch" in python_es and f'index="{allowed}"' in python_es
    python_os = copied(page, "python-os")
    assert "from opensearchpy import OpenSearch" in python_os and '"include_dropped": True' in python_os
    for text in (curl, python_es, python_os):
        assert secured.READER.password not in text and ALICE.split()[1] not in text
    # Each snippet, run as the user would (credentials from the environment), gets the same decisions.
    wanted = "".join(f"{hit['_id']} {hit['_chunkrag']['reason']}\n" for hit in expected["hits"]["hits"])
    for snippet in (python_es, python_os):
        assert run_snippet(snippet, monkeypatch) == wanted
    ran = subprocess.run(
        ["sh", "-c", curl],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
        env={"PATH": os.environ["PATH"], **credentials_env(curl)},
    )
    assert [(h["_id"], h["_chunkrag"]["reason"]) for h in json.loads(ran.stdout)["hits"]["hits"]] == [
        (h["_id"], h["_chunkrag"]["reason"]) for h in expected["hits"]["hits"]
    ]
    copied(page, "curl")
    shot(page.locator("#copy"), "copy_as")


@pytest.mark.parametrize("setting_b", ["judge", "topk"])
def test_side_by_side_highlights_what_one_setting_keeps_and_the_other_drops(
    page, forward_gateway, secured_indices, setting_b
):
    allowed, _ = secured_indices
    open_page(page, forward_gateway)
    sign_in(page, user=secured.READER.name, password=secured.READER.password)
    listed_indices(page)
    page.select_option("#index", allowed)
    page.fill("#question", QUESTION)
    # A: the default filter with a lower cut; B: the LLM judge, or plain hybrid top-3.
    page.fill("#setting-a-cut", "0.05")
    page.select_option("#setting-b-preset", setting_b)
    if setting_b == "topk":
        page.fill("#setting-b-candidates", "3")
    run(page, "#compare")

    a = api_search(forward_gateway, allowed, json.loads(copied(page, "body", "A")), ALICE)
    b = api_search(forward_gateway, allowed, json.loads(copied(page, "body", "B")), ALICE)

    def kept(response):
        return {hit["_id"] for hit in response["hits"]["hits"]}

    def decisions(response):
        return {chunk_id: kept_ for chunk_id, kept_, _ in api_decisions(response)}

    rows = {row["id"]: row for row in page_rows(page, "#comparison-table")}
    assert set(rows) == set(decisions(a)) | set(decisions(b))
    for chunk_id, row in rows.items():
        assert (row["a"], row["b"]) == (decisions(a).get(chunk_id, "absent"), decisions(b).get(chunk_id, "absent"))
    differs = set(page.eval_on_selector_all("#comparison-table tr.differs", "rows => rows.map(r => r.dataset.id)"))
    assert differs == kept(a) ^ kept(b) and differs
    assert page.text_content("#only-a").endswith(str(len(kept(a) - kept(b))))
    assert page.text_content("#only-b").endswith(str(len(kept(b) - kept(a))))
    for side, response in (("a", a), ("b", b)):
        characters = sum(len(hit["_source"]["text"]) for hit in response["hits"]["hits"])
        assert f"kept {len(kept(response))}, {characters} characters" in page.text_content(f"#compare-{side}")
    shot(page.locator("#comparison"), "side_by_side" if setting_b == "judge" else "side_by_side_topk")


def test_the_judge_setting_shows_the_judges_share_and_its_model_calls(page, forward_gateway, secured_indices):
    allowed, _ = secured_indices
    open_page(page, forward_gateway)
    sign_in(page, user=secured.READER.name, password=secured.READER.password)
    listed_indices(page)
    page.select_option("#setting-a-preset", "judge")
    ask(page, allowed, QUESTION)
    body = json.loads(copied(page, "body"))
    assert body["ext"]["chunkrag"]["judge_top"] == 9
    expected = assert_page_matches_api(page, forward_gateway, allowed, ALICE)
    columns = page.eval_on_selector_all("#candidates th[data-score]", "cells => cells.map(c => c.dataset.score)")
    assert "base" in columns and page.locator("#candidates th", has_text="judge share").count() == 1
    judged = [
        hit
        for hit in expected["hits"]["hits"] + expected["chunkrag"]["dropped"]
        if "base" in hit["_chunkrag"]["scores"]
    ]
    assert judged
    shown = page.text_content(f"#candidates tr[data-id='{judged[0]['_id']}']")
    assert f"{judged[0]['_chunkrag']['scores']['base']:.3f}" in shown
    # The scripted judge ran on the first request at least (the API's repeat may be cached).
    assert "model calls 0 " not in page.text_content("#summary")
    shot(page.locator("#result"), "ask_judge")


def test_the_gate_says_why_nothing_was_kept_for_a_question_the_index_cannot_answer(
    page, forward_gateway, secured_indices
):
    allowed, _ = secured_indices
    open_page(page, forward_gateway)
    sign_in(page, user=secured.READER.name, password=secured.READER.password)
    listed_indices(page)
    page.select_option("#setting-a-gate", "retrieval")
    ask(page, allowed, "What is the boiling point of mercury?")
    body = json.loads(copied(page, "body"))
    assert body["ext"]["chunkrag"]["gate"] == "retrieval"
    assert page.text_content("#fact-kept").endswith("0 of " + str(len(page_rows(page))))
    said = page.text_content("#fact-nothing-relevant")
    assert "no candidate looks relevant: P(relevant)" in said and "best cosine" in said
    assert "<" in page.text_content("#fact-gate")
    shot(page.locator("#result"), "ask_nothing_relevant")


def test_a_chunk_shows_the_segment_it_would_extend_to(page, forward_gateway, secured_indices):
    allowed, _ = secured_indices
    open_page(page, forward_gateway)
    sign_in(page, user=secured.READER.name, password=secured.READER.password)
    listed_indices(page)
    # Plain top-k: the retrieval scores are the relevance, and the best chunk's document makes a segment.
    page.select_option("#setting-a-preset", "topk")
    ask(page, allowed, QUESTION)
    best = page_rows(page)[0]["id"]
    page.click(f"#candidates tr[data-id='{best}']")
    page.wait_for_selector("#neighbours[data-loaded=true] li.self")
    body = json.loads(copied(page, "body"))
    body["ext"]["chunkrag"].update(segments=True, include_dropped=False)
    segments = api_search(forward_gateway, allowed, body, ALICE)["hits"]["hits"]
    [holding] = [hit for hit in segments if best in hit["_chunkrag"]["chunk_ids"]]
    assert page.get_attribute("#segment", "data-segment") == holding["_id"]
    in_segment = page.eval_on_selector_all("#neighbours li.in-segment", "items => items.map(i => i.dataset.id)")
    assert in_segment == holding["_chunkrag"]["chunk_ids"]
    shot(page.locator("#neighbours"), "neighbours")


def test_a_query_set_uploaded_as_jsonl_is_scored_per_question_and_in_total(
    page, forward_gateway, secured_indices, tmp_path
):
    allowed, _ = secured_indices
    upload = tmp_path / "questions.jsonl"
    upload.write_text("\n".join(json.dumps(item) for item in QUERY_SET) + "\n")
    open_page(page, forward_gateway)
    sign_in(page, user=secured.READER.name, password=secured.READER.password)
    listed_indices(page)
    page.select_option("#index", allowed)
    page.fill("#setting-b-candidates", "2")  # B: plain top-2, which misses some answers
    page.set_input_files("#queryset-file", str(upload))
    run(page, "#queryset-run")

    rows = page.eval_on_selector_all(
        "#queryset-table tbody tr[data-question]", "rows => rows.map(r => r.dataset.question)"
    )
    assert rows == [item["question"] for item in QUERY_SET]
    totals = json.loads(page.get_attribute("#queryset-result", "data-totals"))
    # The same measure from the API: answer in the kept chunks of setting A.
    after = []
    for item in QUERY_SET:
        body = {
            "query": {"match": {"text": item["question"]}},
            "size": 8,
            "ext": {"chunkrag": {"candidates": 8, "answer": False, "include_dropped": True}},
        }
        response = api_search(forward_gateway, allowed, body, ALICE)
        context = " ".join(hit["_source"]["text"] for hit in response["hits"]["hits"]).lower()
        after.append(any(answer.lower() in context for answer in item["answers"]))
    assert totals["afterA"] == pytest.approx(sum(after) / len(after))
    assert totals["beforeB"] == totals["afterB"]  # B keeps every candidate it retrieved
    # eval's three plots (answer in context, kept vs threshold, scores by gold) and the characters kept.
    assert page.locator("#queryset-chart svg").count() == 4
    # One dot per candidate: A's 8 and B's 2 for each question.
    assert page.locator("#queryset-chart svg.gold-chart circle").count() == len(QUERY_SET) * (8 + 2)
    shot(page.locator("#queryset"), "query_set")


def test_a_chunk_holding_a_script_tag_is_shown_as_text(page, forward_gateway, secured_indices):
    allowed, _ = secured_indices
    open_page(page, forward_gateway)
    sign_in(page, user=secured.READER.name, password=secured.READER.password)
    listed_indices(page)
    page.fill("#setting-a-candidates", "20")
    ask(page, allowed, "What does the Tokyo office notice read?")
    texts = page.eval_on_selector_all("#candidates .text", "cells => cells.map(c => c.textContent)")
    assert any(INJECTED in text for text in texts)
    assert page.evaluate("window.__pwned === undefined")
    assert page.locator("#candidates script").count() == 0
    page.locator("#candidates tr", has_text="window.__pwned").first.scroll_into_view_if_needed()
    shot(page.locator("#candidates tr", has_text="window.__pwned").first, "script_as_text")


# --- service mode, the open node, a gateway API key ------------------------------------


@pytest.fixture(scope="module")
def team_indices(es, embedder, settings):
    suffix = uuid.uuid4().hex[:8]
    team, other = f"test-playground-team-{suffix}", f"test-playground-other-{suffix}"
    for name in (team, other):
        ingest_documents(documents(), client=es, embedder=embedder, settings=settings, index=name, progress=False)
    yield team, other
    for name in (team, other):
        es.delete_index(name)


def test_service_mode_signs_in_with_a_gateway_key_and_lists_only_its_indices(
    page, settings, embedder, chat, team_indices
):
    team, other = team_indices
    key = "playground-key-" + uuid.uuid4().hex
    # The open node has no security, so nothing the cluster could enforce: gateway-only enforcement is
    # accepted explicitly here (the secured node's derived keys are tested in test_gateway_service_mode.py).
    gateway = dataclasses.replace(
        settings.gateway,
        auth="service",
        api_keys=f"team:{key_hash(key)}:test-playground-team-*",
        enforce_in_gateway_only=True,
    )
    chosen = dataclasses.replace(settings, redis_url=own_cache(settings), gateway=gateway)
    with serving(create_app(chosen, model=chat, embedder=embedder)) as url:
        open_page(page, url)
        sign_in(page, api_key="not-" + key)
        page.wait_for_selector("#login-error:has-text('Sign-in failed')")
        sign_in(page, api_key=key)
        names = listed_indices(page)
        assert team in names and other not in names
        ask(page, team, QUESTION)
        assert_page_matches_api(page, url, team, f"ApiKey {key}")


# --- OpenSearch ---------------------------------------------------------------------------


def test_the_page_works_in_front_of_opensearch(page, settings, embedder, chat):
    chosen = dataclasses.replace(settings, search_backend="opensearch", redis_url=own_cache(settings))
    backend = make_backend(chosen)
    name = f"test-playground-os-{uuid.uuid4().hex[:8]}"
    report = ingest_documents(
        documents(), client=backend, embedder=embedder, settings=chosen, index=name, progress=False
    )
    assert report.ok, report.errors
    try:
        with serving(create_app(chosen, model=chat, embedder=embedder)) as url:
            open_page(page, url)
            sign_in(page)
            assert name in listed_indices(page)
            ask(page, name, QUESTION)
            # Every candidate's decision on the page is the API's (the default
            # drops only what is clearly irrelevant, so there may be none dropped).
            expected = assert_page_matches_api(page, url, name)
            assert page_rows(page)
            assert page.text_content("#answer-text") == expected["chunkrag"]["answer"]["text"]
            page.click(f"#candidates tr[data-id='{page_rows(page)[0]['id']}']")
            page.wait_for_selector("#neighbours[data-loaded=true] li.self")
            shot(page.locator("#result"), "ask_opensearch")
    finally:
        backend.delete_index(name)
        backend.close()


# --- an index of the caller's own: post-search, both engines ----------------------------------------

EXISTING_MAPPING = {
    "properties": {
        "title": {"type": "text", "fields": {"keyword": {"type": "keyword"}}},
        "body": {"type": "text"},
        "url": {"type": "keyword"},
    }
}
EXISTING_DOCS = {
    "tokyo-guide": {
        "title": "Tokyo guide",
        "body": "Tokyo is the capital of Japan. Its metropolitan area is home to about 37 million people. "
        "Trains run from early morning until after midnight. Many visitors buy a rail pass at the airport.",
        "url": "https://example.test/tokyo",
    },
    "kyoto-notes": {
        "title": "Kyoto notes",
        "body": "Kyoto was the imperial capital of Japan for over a thousand years. It has many Buddhist temples. "
        "The autumn leaves draw crowds every November.",
        "url": "https://example.test/kyoto",
    },
    "office-notice": {
        "title": "Office notice",
        "body": f"The Tokyo office notice for visitors to Japan reads {INJECTED} and nothing else. "
        "Visitors sign in at the front desk.",
        "url": "https://example.test/notice",
    },
    "osaka": {
        "title": "Osaka",
        "body": "Osaka is a large port city in Japan. It is known for its food. Osaka Castle is a famous landmark.",
        "url": "https://example.test/osaka",
    },
    "checklist": {  # no body: the hit passes through marked "no text"
        "title": "Japan travel checklist",
        "url": "https://example.test/checklist",
    },
}


@pytest.fixture
def existing_and_chunk_index(engine, embedder, settings):
    """An index this project did not write (title/body/url) and a chunk index, on ``engine``."""
    suffix = uuid.uuid4().hex[:8]
    existing, chunks = f"test-playground-kb-{suffix}", f"test-playground-chunks-{suffix}"
    engine.create_index(
        existing, {"settings": {"number_of_shards": 1, "number_of_replicas": 0}, "mappings": EXISTING_MAPPING}
    )
    actions = ({"_op_type": "index", "_index": existing, "_id": i, "_source": doc} for i, doc in EXISTING_DOCS.items())
    assert all(ok for ok, _ in engine.bulk(actions, chunk_size=100, max_retries=0, initial_backoff=1))
    engine.refresh(existing)
    chosen = dataclasses.replace(settings, search_backend=engine.engine)
    report = ingest_documents(
        documents(), client=engine, embedder=embedder, settings=chosen, index=chunks, progress=False
    )
    assert report.ok, report.errors
    yield existing, chunks
    for name in (existing, chunks):
        engine.delete_index(name)


def shown_hits(page) -> list[dict]:
    """Each hit the page shows: its ref and its passages (field, offsets, kept, reason) in order."""
    return page.eval_on_selector_all(
        "#hits-list article.hit",
        """cards => cards.map(card => ({ref: card.dataset.ref, kept: card.dataset.kept,
            passages: [...card.querySelectorAll('li.passage')].map(p => ({...p.dataset}))}))""",
    )


def api_hits(response: dict) -> list[dict]:
    """The same from the API's JSON: kept passages first, then the dropped ones."""

    def entry(passage):
        return {
            "field": passage["field"],
            "start": str(passage["start"]),
            "end": str(passage["end"]),
            "kept": str(passage["kept"]).lower(),
            "reason": passage.get("reason", ""),
        }

    return [
        {
            "ref": f"{hit['_index']}/{hit['_id']}",
            "kept": str(hit["_chunkrag"]["kept"]).lower(),
            "passages": [entry(p) for p in hit["_chunkrag"]["passages"] + hit["_chunkrag"].get("dropped", [])],
        }
        for hit in response["hits"]["hits"]
    ]


def test_an_index_of_your_own_shows_each_hits_kept_passages(
    page, engine, settings, embedder, chat, existing_and_chunk_index
):
    existing, chunks = existing_and_chunk_index
    chosen = dataclasses.replace(settings, search_backend=engine.engine, redis_url=own_cache(settings))
    with serving(create_app(chosen, model=chat, embedder=embedder)) as url:
        open_page(page, url)
        sign_in(page)
        names = listed_indices(page)
        assert existing in names and chunks in names and not [n for n in names if n.startswith(".")]
        # The picker marks each index: a chunk index, or one of yours (post-search).
        kinds = dict(page.eval_on_selector_all("#index option", "os => os.map(o => [o.value, o.dataset.kind])"))
        assert (kinds[existing], kinds[chunks]) == ("existing", "chunks")
        page.select_option("#index", chunks)
        assert page.is_hidden("#post-search")
        page.select_option("#index", existing)
        assert page.get_attribute("#index-kind", "data-kind") == "existing"
        assert page.is_disabled("#compare") and page.is_disabled("#setting-a-candidates")

        # The body editor starts as a multi_match of the question over the detected text fields and title.
        page.fill("#question", QUESTION)
        assert json.loads(page.input_value("#body-editor")) == {
            "query": {"multi_match": {"query": QUESTION, "fields": ["body", "title"]}},
            "size": 10,
        }
        run(page, "#ask")
        body = json.loads(copied(page, "body"))
        assert body["ext"]["chunkrag"]["mode"] == "post_search" and body["ext"]["chunkrag"]["include_dropped"]
        expected = api_search(url, existing, body)
        # Each hit as the API returned it, in its order, with its kept passages within it and the dropped
        # ones (greyed) after them.
        assert shown_hits(page) == api_hits(expected)
        assert any(hit["_chunkrag"]["kept"] for hit in expected["hits"]["hits"])
        kept_texts = page.eval_on_selector_all(
            "#hits-list article[data-id='tokyo-guide'] li.passage.kept .text", "ps => ps.map(p => p.textContent)"
        )
        assert any("Tokyo is the capital of Japan" in text for text in kept_texts)
        assert page.text_content("#hits-list article[data-id='tokyo-guide'] .title") == "Tokyo guide"
        # Hits without a kept passage are marked, the one without text as such.
        marks = dict(page.eval_on_selector_all("#hits-list article", "cs => cs.map(c => [c.dataset.id, c.className])"))
        assert marks["checklist"] == "hit no-text"
        assert page.text_content("#hits-list article[data-id='checklist'] .badge") == "no text"
        for hit in expected["hits"]["hits"]:
            if hit["_chunkrag"].get("reason") == "no_kept_passage":
                assert marks[hit["_id"]] == "hit empty"
        # The answer cites <index>/<_id>, each citation finding its hit.
        answer = expected["chunkrag"]["answer"]
        assert page.text_content("#hits-answer-text") == answer["text"]
        cited = page.eval_on_selector_all("#hits-answer .citation", "links => links.map(l => l.dataset.ref)")
        assert cited == answer["citations"] and cited
        page.click("#hits-answer .citation")
        assert page.get_attribute("#hits-list article.focus", "data-ref") == cited[0]
        # A document holding <script>: its passage is text, and nothing ran.
        texts = page.eval_on_selector_all("#hits-list .passage .text", "ps => ps.map(p => p.textContent)")
        assert any(INJECTED in text for text in texts)
        assert page.evaluate("window.__pwned === undefined")
        assert page.locator("#hits-list script").count() == 0
        # The copied Python snippet, run as a user would, gets the same hits and passages.
        snippet = copied(page, "python-os" if engine.engine == "opensearch" else "python-es")
        assert "body=" in snippet and '"mode": "post_search"' in snippet
        printed = io.StringIO()
        with contextlib.redirect_stdout(printed):
            exec(compile(snippet, "copied snippet", "exec"), {})  # noqa: S102 - the page's own output
        assert printed.getvalue() == "".join(
            f"{hit['_index']} {hit['_id']} {len(hit['_chunkrag']['passages'])}\n" for hit in expected["hits"]["hits"]
        )
        shot(page.locator("#query"), f"post_search_body_{engine.engine}")
        shot(page.locator("#hits-result"), f"post_search_{engine.engine}")

        # Your own body, with aggregations and hits without a kept passage left out (counted).
        own = {
            "query": {"match": {"body": "capital of Japan"}},
            "aggs": {"sites": {"terms": {"field": "url"}}},
            "size": 5,
        }
        page.fill("#body-editor", json.dumps(own))
        page.select_option("#ps-empty-hits", "drop")
        page.uncheck("#ps-include-dropped")
        page.fill("#question", "What is the capital of Japan? (not in the body)")  # the edited body stays
        run(page, "#ask")
        body = json.loads(copied(page, "body"))
        assert {k: v for k, v in body.items() if k != "ext"} == own
        assert body["ext"]["chunkrag"]["empty_hits"] == "drop"
        expected = api_search(url, existing, body)
        assert shown_hits(page) == api_hits(expected)
        assert page.is_visible("#aggregations")
        assert json.loads(page.text_content("#aggregations-text")) == expected["aggregations"]
        left_out = expected["chunkrag"]["hits"]["dropped"]
        assert f"({left_out} left out)" in page.text_content("#fact-empty")
