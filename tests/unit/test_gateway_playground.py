"""The playground's server side in process: its static files are public and
carry the strict CSP; the index list goes through the guard and shows only
what the caller may read; the setting turns it off. The page itself is tested
in a real browser (tests/integration/test_playground_browser.py)."""

import re
from importlib import resources

import orjson
import pytest
from starlette.testclient import TestClient

from chunkrag_core.settings import GatewaySettings, PostSearchSettings, Settings
from chunkrag_gateway import create_app
from chunkrag_gateway.identity import basic, key_hash
from chunkrag_gateway.origin import HttpResponse
from chunkrag_gateway.playground import ASSETS, CSP, INDICES, PAGE, PUBLIC_PATHS
from tests.unit.test_gateway_app import FakeElasticsearch, FakeEmbedder, FakeModel, RecordingTransport, judge_factory

KEY = "team-key-0123456789"
RESOLVED = {
    "indices": [
        {"name": "docs-1", "attributes": ["open"]},
        {"name": "logs-1", "attributes": ["open"]},
        {"name": ".security-7", "attributes": ["open"]},
    ],
    "aliases": [{"name": "docs", "indices": ["docs-1"]}],
    "data_streams": [],
}


CHUNK_CAPS = {
    "doc_id": {"keyword": {"type": "keyword"}},
    "position": {"integer": {"type": "integer"}},
    "text": {"text": {"type": "text"}},
    "vector": {"dense_vector": {"type": "dense_vector"}},
}
# _field_caps of each index: docs-1 (and its alias) a chunk index, logs-1 an index of the caller's own.
FIELD_CAPS = {
    "docs": CHUNK_CAPS,
    "docs-1": CHUNK_CAPS,
    "logs-1": {
        "_id": {"_id": {"type": "_id"}},
        "title": {"text": {"type": "text"}},
        "title.raw": {"keyword": {"type": "keyword"}},
        "body": {"text": {"type": "text"}},
        "url": {"keyword": {"type": "keyword"}},
        "views": {"long": {"type": "long"}},
    },
}


def json_reply(value, status=200):
    return HttpResponse(status, ((b"content-type", b"application/json"),), orjson.dumps(value))


def resolve_reply(method, target):
    if target.endswith("/_field_caps?fields=*"):
        name = target.split("/")[1]
        if name not in FIELD_CAPS:
            return json_reply({"error": {"type": "security_exception", "reason": "no"}, "status": 403}, 403)
        return json_reply({"indices": [name], "fields": FIELD_CAPS[name]})
    return json_reply(RESOLVED)


def refusal(method, target):
    headers = ((b"content-type", b"application/json"), (b"www-authenticate", b'Basic realm="security"'))
    return HttpResponse(
        401,
        headers,
        b'{"error":{"type":"security_exception","reason":"unable to authenticate user [alice]"},"status":401}',
    )


def client_for(transport=None, **gateway):
    settings = Settings(es_url="http://gateway:own-secret@es.internal:9200", gateway=GatewaySettings(**gateway))
    app = create_app(
        settings,
        es=FakeElasticsearch(),
        embedder=FakeEmbedder(),
        model=FakeModel(),
        judge_many_factory=judge_factory,
        http_transport=transport or RecordingTransport(resolve_reply),
    )
    return TestClient(app)


SERVICE = {"auth": "service", "api_keys": f"team:{key_hash(KEY)}:docs*"}


@pytest.mark.parametrize("gateway", [{}, SERVICE], ids=["forward", "service"])
def test_the_page_and_its_assets_need_no_credentials_and_carry_the_strict_csp(gateway):
    client = client_for(**gateway)
    for path, (_, media_type) in ASSETS.items():
        response = client.get(path)
        assert response.status_code == 200, path
        assert response.headers["content-type"] == media_type
        assert response.headers["content-security-policy"] == CSP
        assert response.headers["x-content-type-options"] == "nosniff"
        assert response.headers["x-frame-options"] == "DENY"
    assert "script-src 'self'" in CSP and "unsafe" not in CSP and "form-action 'none'" in CSP


def test_only_the_static_files_are_public():
    assert set(PUBLIC_PATHS) == set(ASSETS) and INDICES not in PUBLIC_PATHS
    response = client_for(**SERVICE).get(INDICES)
    assert response.status_code == 401


def derived_key_then_resolve(method, target):
    if target == "/_security/api_key":  # the gateway derives the key's cluster credentials first
        return HttpResponse(200, ((b"content-type", b"application/json"),), b'{"id":"d1","encoded":"ZDE6c2VjcmV0"}')
    return resolve_reply(method, target)


def test_service_mode_lists_only_the_indices_of_the_gateway_key():
    transport = RecordingTransport(derived_key_then_resolve)
    response = client_for(transport, **SERVICE).get(INDICES, headers={"authorization": f"ApiKey {KEY}"})
    assert response.status_code == 200
    assert response.json()["indices"] == ["docs", "docs-1"]
    # The cluster is asked with the key the gateway derived for this gateway key (limited by the
    # cluster to its patterns), never with the caller's gateway key or the gateway's own credentials;
    # the fields of only the indices listed.
    [create, (method, target, headers, _), *described] = transport.requests
    assert create[:2] == ("POST", "/_security/api_key")
    assert (method, target) == ("GET", "/_resolve/index/*?expand_wildcards=open")
    assert headers[b"authorization"] == b"ApiKey ZDE6c2VjcmV0"
    assert sorted(t for _, t, _, _ in described) == ["/docs-1/_field_caps?fields=*", "/docs/_field_caps?fields=*"]
    assert all(h[b"authorization"] == b"ApiKey ZDE6c2VjcmV0" for _, _, h, _ in described)


def test_forward_mode_asks_the_cluster_with_the_callers_credentials():
    transport = RecordingTransport(resolve_reply)
    alice = basic("alice", "pw")
    response = client_for(transport).get(INDICES, headers={"authorization": alice.decode()})
    assert response.json()["indices"] == ["docs", "docs-1", "logs-1"]  # the cluster filtered them already
    assert all(headers[b"authorization"] == alice for _, _, headers, _ in transport.requests)


def test_each_index_is_described_as_a_chunk_index_or_one_for_post_search():
    response = client_for(RecordingTransport(resolve_reply)).get(INDICES)
    assert response.json()["described"] == {
        "docs": {"kind": "chunks"},
        "docs-1": {"kind": "chunks"},
        # Post-search splits body; title heads the passages; multi-fields and keywords are not text.
        "logs-1": {"kind": "existing", "fields": ["body"], "title": "title", "left_out": {}},
    }


def test_configured_fields_describe_an_index_and_a_field_that_is_not_text_is_named():
    transport = RecordingTransport(resolve_reply)
    settings = Settings(post_search=PostSearchSettings(fields="logs-*:url"))
    app = create_app(settings, es=FakeElasticsearch(), embedder=FakeEmbedder(), http_transport=transport)
    described = TestClient(app).get(INDICES).json()["described"]["logs-1"]
    assert described["kind"] == "existing" and described["fields"] == []
    assert "[url]" in described["problem"] and "keyword" in described["problem"]


def test_past_the_cap_indices_are_listed_undescribed(monkeypatch):
    from chunkrag_gateway import playground

    monkeypatch.setattr(playground, "DESCRIBED_INDICES", 1)
    transport = RecordingTransport(resolve_reply)
    listed = client_for(transport).get(INDICES).json()
    assert listed["indices"] == ["docs", "docs-1", "logs-1"]
    assert listed["described"]["docs"] == {"kind": "chunks"}
    assert [listed["described"][name]["kind"] for name in ("docs-1", "logs-1")] == ["unknown", "unknown"]
    assert [t for _, t, _, _ in transport.requests if "_field_caps" in t] == ["/docs/_field_caps?fields=*"]


def test_an_index_whose_fields_the_cluster_will_not_list_is_unknown():
    def refusing(method, target):
        if target.startswith("/logs-1/"):
            return json_reply({"error": {"type": "security_exception", "reason": "no"}, "status": 403}, 403)
        return resolve_reply(method, target)

    described = client_for(RecordingTransport(refusing)).get(INDICES).json()["described"]
    assert described["logs-1"] == {"kind": "unknown", "reason": "_field_caps answered 403"}
    assert described["docs"] == {"kind": "chunks"}


def test_a_refusal_comes_back_without_a_browser_challenge():
    response = client_for(RecordingTransport(refusal)).get(
        INDICES, headers={"authorization": basic("alice", "wrong").decode()}
    )
    assert response.status_code == 401
    assert response.json()["error"]["type"] == "security_exception"
    assert "www-authenticate" not in response.headers


def test_the_setting_turns_it_off():
    client = client_for(playground=False)
    for path in (*ASSETS, INDICES):
        assert client.get(path).status_code == 404


def test_the_playground_is_not_in_the_openapi_document():
    paths = client_for().get("/openapi.json").json()["paths"]
    assert not [path for path in paths if path.startswith(PAGE)]


def asset(name: str) -> str:
    return resources.files("chunkrag_gateway").joinpath("playground", name).read_text()


def test_the_page_has_no_inline_script_or_style_and_nothing_from_elsewhere():
    html = asset("index.html")
    scripts = re.findall(r"<script\b([^>]*)>(.*?)</script>", html, re.DOTALL)
    assert scripts and all('src="playground/' in attrs and not body.strip() for attrs, body in scripts)
    assert "<style" not in html and " style=" not in html and not re.search(r"\son[a-z]+=", html)
    assert not re.search(r"(src|href)=\"(https?:)?//", html)


def test_the_script_keeps_credentials_in_memory_and_never_parses_html():
    script = asset("app.js")
    for forbidden in (
        "innerHTML",
        "outerHTML",
        "insertAdjacentHTML",
        "document.write",
        "localStorage",
        "sessionStorage",
        "document.cookie",
        "eval(",
        "new Function",
    ):
        assert forbidden not in script, forbidden
    assert 'credentials: "omit"' in script


def test_the_setting_is_read_from_the_environment():
    assert Settings.from_env({}).gateway.playground is True
    assert Settings.from_env({"CHUNKRAG_GATEWAY_PLAYGROUND": "false"}).gateway.playground is False


def test_the_script_is_served_with_the_filters_defaults_from_the_declaration():
    from chunkrag_filter.pipeline import JUDGE_TOP_WHEN_ASKED, RELEVANCE_SOURCES, RERANKERS, THRESHOLDS
    from chunkrag_filter.processors.gate import GATES
    from chunkrag_gateway.playground import DEFAULTS_MARK, page_defaults
    from search_extension.ask import DEFAULT_CANDIDATES
    from search_extension.options import MAX_PASSAGES_LIMIT, OptionsModel
    from search_extension.post_search import EMPTY_HITS
    from search_extension.queries import MODES

    assert asset("app.js").count(DEFAULTS_MARK.decode()) == 1
    served = client_for(max_candidates=6).get(f"{PAGE}/app.js").text
    assert DEFAULTS_MARK.decode() not in served
    written = orjson.loads(re.search(r"const DEFAULTS = (\{.*?\});", served)[1])
    assert (
        written
        == page_defaults(6)
        == {
            "modes": list(MODES),
            "candidates": min(DEFAULT_CANDIDATES, 6),
            "max_candidates": 6,
            "fixed_threshold": OptionsModel.model_fields["fixed_threshold"].default,
            "judge_top": JUDGE_TOP_WHEN_ASKED,
            "empty_hits": list(EMPTY_HITS),
            "empty_hits_default": OptionsModel.model_fields["empty_hits"].default,
            "max_passages": OptionsModel.model_fields["max_passages"].default,
            "max_passages_limit": MAX_PASSAGES_LIMIT,
            "relevance": list(RELEVANCE_SOURCES),
            "relevance_default": OptionsModel.model_fields["relevance"].default,
            "reranks": list(RERANKERS),
            "rerank_default": OptionsModel.model_fields["rerank"].default,
            "gates": list(GATES),
            "gate_default": OptionsModel.model_fields["gate"].default,
        }
    )
    # The thresholds the page offers are the filter's.
    offered = re.search(r'id: id\("threshold"\) \},\s*\[([^\]]*)\]', served)[1]
    assert set(re.findall(r'"(\w+)"', offered)) <= set(THRESHOLDS)
