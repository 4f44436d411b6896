"""Caller identity, the pass-through allow-list and the limits: the pure
parts with literal values, then the app in process with its edges replaced
by doubles (what would be sent to Elasticsearch is recorded)."""

import asyncio
import hashlib

import orjson
import pytest
from starlette.testclient import TestClient

from chunkrag_core.settings import GatewaySettings, Settings
from chunkrag_gateway import create_app, errors
from chunkrag_gateway.identity import (
    ApiKey,
    Authenticator,
    Caller,
    ConfigError,
    basic,
    check_indices,
    es_for,
    key_hash,
    parse_api_keys,
)
from chunkrag_gateway.limits import CallerSlots, FilteredQueue, RateLimiter
from chunkrag_gateway.origin import HttpResponse
from chunkrag_gateway.policy import classify, parse_classes
from tests.unit.test_gateway_app import (
    FakeElasticsearch,
    FakeEmbedder,
    FakeModel,
    RecordingTransport,
    es_reply,
    judge_factory,
)

KEY_A, KEY_B = "key-of-team-a", "key-of-ops"
KEYS = f"team-a:{key_hash(KEY_A)}:docs-*,faq ; ops:{key_hash(KEY_B)}:*"


# --- identity -------------------------------------------------------------------


def test_api_keys_are_parsed_from_hashes():
    keys = parse_api_keys(KEYS)
    assert [(k.name, k.indices) for k in keys] == [("team-a", ("docs-*", "faq")), ("ops", ("*",))]
    assert keys[0].sha256 == hashlib.sha256(KEY_A.encode()).digest()
    assert parse_api_keys("") == ()


@pytest.mark.parametrize(
    "raw, message",
    [
        ("team-a:abc:docs", "64 hex digits"),
        ("team-a:" + "0" * 64, "name:sha256-hex:index-patterns"),
        ("team-a:" + "0" * 64 + ":", "at least one index pattern"),
        (f"a:{'0' * 64}:x;a:{'1' * 64}:y", "twice"),
    ],
)
def test_bad_api_key_entries_are_refused_with_the_reason(raw, message):
    with pytest.raises(ConfigError, match=message):
        parse_api_keys(raw)


def test_modes_must_match_the_keys():
    with pytest.raises(ConfigError, match="needs CHUNKRAG_GATEWAY_API_KEYS"):
        Authenticator("service", ())
    with pytest.raises(ConfigError, match="set it to service"):
        Authenticator("forward", parse_api_keys(KEYS))
    with pytest.raises(ConfigError, match="forward, service"):
        Authenticator("open", ())


def test_forward_mode_keeps_the_callers_authorization():
    auth = Authenticator("forward", ())
    caller = auth.caller([(b"authorization", b"Basic dTpw")], ("10.0.0.1", 5))
    assert (
        caller.authorization == b"Basic dTpw" and caller.indices is None and caller.identity.startswith("credentials:")
    )
    assert "dTpw" not in caller.identity  # the rate-limit key is a hash, not the credentials
    anonymous = auth.caller([], ("10.0.0.1", 5))
    assert anonymous.authorization is None and anonymous.identity == "address:10.0.0.1"


@pytest.mark.parametrize(
    "header", [b"ApiKey " + KEY_A.encode(), b"Bearer " + KEY_A.encode(), b"apikey  " + KEY_A.encode()]
)
def test_service_mode_admits_a_valid_key_in_either_scheme(header):
    caller = Authenticator("service", parse_api_keys(KEYS)).caller([(b"authorization", header)])
    assert caller.key.name == "team-a" and caller.authorization is None and caller.identity == "key:team-a"


@pytest.mark.parametrize(
    "headers, reason",
    [
        ([], "needs a gateway API key"),
        ([(b"authorization", b"ApiKey wrong")], "not valid"),
        ([(b"authorization", basic("u", KEY_A))], "needs a gateway API key"),
    ],
)
def test_service_mode_refuses_without_a_valid_key(headers, reason):
    with pytest.raises(errors.GatewayError) as refused:
        Authenticator("service", parse_api_keys(KEYS)).caller(headers)
    assert (
        refused.value.status == 401
        and reason in refused.value.reason
        and refused.value.headers["www-authenticate"].startswith("ApiKey")
    )


def test_index_allow_list():
    team = Caller(key=ApiKey("team-a", b"x" * 32, ("docs-*", "faq")))
    check_indices(team, ("docs-1", "faq"), what="t")
    check_indices(team, ("docs-*",), what="t")  # the allowed pattern itself
    for refused in (
        ("docs-1", "logs"),
        ("*",),
        ("_all",),
        ("docs*",),
        ("-faq",),
        ("docs-x:logs",),
        ("<docs-{now/d}>",),
    ):
        with pytest.raises(errors.GatewayError) as forbidden:
            check_indices(team, refused, what="t")
        assert forbidden.value.status == 403 and "team-a" in forbidden.value.reason
    with pytest.raises(errors.GatewayError, match="names no index"):
        check_indices(team, None, what="GET /_count")
    check_indices(Caller(key=ApiKey("ops", b"x" * 32, ("*",))), None, what="t")
    check_indices(Caller(authorization=b"Basic x"), None, what="t")  # forward mode: the cluster decides


def test_es_for_adds_the_callers_header_per_request():
    class Client:
        def options(self, headers):
            return ("with", headers)

    client = Client()
    assert es_for(client, Caller()) is client
    assert es_for(client, Caller(authorization=b"ApiKey abc")) == ("with", {"authorization": "ApiKey abc"})


def test_the_real_client_sends_the_callers_header():
    from elasticsearch import Elasticsearch

    from chunkrag_gateway.edges import strip_credentials

    base = Elasticsearch(strip_credentials("http://gw:secret@127.0.0.1:1"))
    assert "authorization" not in base._headers
    assert (
        es_for(base, Caller(authorization=basic("alice", "pw")))._headers["authorization"]
        == basic("alice", "pw").decode()
    )
    assert strip_credentials("https://u:p@[::1]:9200/prefix") == "https://[::1]:9200/prefix"


# --- the endpoint allow-list ---------------------------------------------------


@pytest.mark.parametrize(
    "method, path, kind, indices",
    [
        ("POST", "/docs/_search", "read", ("docs",)),
        ("GET", "/_search", "read", None),
        ("POST", "/a,b/_count", "read", ("a", "b")),
        ("POST", "/_msearch", "read", None),
        ("GET", "/docs/_mapping", "read", ("docs",)),
        ("GET", "/docs/_mapping/field/text", "read", ("docs",)),
        ("POST", "/docs/_field_caps", "read", ("docs",)),
        ("POST", "/_search/scroll", "read", None),
        ("DELETE", "/_search/scroll/abc", "read", None),
        ("POST", "/docs/_pit", "read", ("docs",)),
        ("DELETE", "/_pit", "read", None),
        ("HEAD", "/docs", "read", ("docs",)),
        ("GET", "/", "read", None),
        ("GET", "/logs-%3Cnow%2Fd%3E/_search", "read", ("logs-<now/d>",)),
        ("GET", "/_all/_search", "read", ("_all",)),
        ("PUT", "/docs/_doc/1", "write", ("docs",)),
        ("DELETE", "/docs", "write", ("docs",)),
        ("POST", "/docs/_delete_by_query", "write", ("docs",)),
        ("GET", "/docs/_doc/1", "write", ("docs",)),
        ("POST", "/_bulk", "write", None),
        ("PUT", "/docs/_mapping", "write", ("docs",)),
        ("GET", "/_cluster/health", "cluster", None),
        ("PUT", "/_cluster/settings", "cluster", None),
        ("GET", "/_cat/indices", "cluster", None),
        ("POST", "/_security/user/x", "cluster", None),
        ("DELETE", "/_search/scroll/a/b", "cluster", None),
    ],
)
def test_endpoints_are_classified(method, path, kind, indices):
    endpoint = classify(method, path)
    assert (endpoint.kind, endpoint.indices) == (kind, indices)


def test_passthrough_classes():
    assert (
        parse_classes("read") == {"read"}
        and parse_classes("read, write") == {"read", "write"}
        and parse_classes("all") == {"read", "write", "cluster"}
    )
    # The other classes add to read: a gateway forwarding writes but no search would serve nobody.
    assert parse_classes("write") == {"read", "write"} and parse_classes("cluster") == {"read", "cluster"}
    for bad in ("", "reads", "read,admin"):
        with pytest.raises(ValueError, match="CHUNKRAG_GATEWAY_PASSTHROUGH"):
            parse_classes(bad)


# --- limits ----------------------------------------------------------------------


def test_rate_limiter_refills_over_time():
    now = [100.0]
    limiter = RateLimiter(2.0, 3, clock=lambda: now[0])
    for _ in range(3):
        limiter.take("a")
    with pytest.raises(errors.GatewayError) as limited:
        limiter.take("a")
    assert limited.value.status == 429 and limited.value.headers["retry-after"] == "1"
    limiter.take("b")  # callers have buckets of their own
    now[0] += 0.5  # one token back at 2/s
    limiter.take("a")
    with pytest.raises(errors.GatewayError):
        limiter.take("a")
    RateLimiter(0, 1).take("a")  # off


def test_each_caller_has_at_most_its_filtered_searches_running_and_waits_briefly_for_more():
    async def scenario():
        # a3 waits this long for a place before its 429; a4's place frees
        # well within it, however slowly the event loop runs (a 0.05 s
        # window was missed by a busy loop).
        slots = CallerSlots(2, retry_after_s=0.5)
        release = asyncio.Event()
        outcomes = []

        async def search(caller, name):
            try:
                async with slots.slot(caller):
                    outcomes.append(f"{name} runs")
                    await release.wait()
            except errors.GatewayError as exc:
                outcomes.append(f"{name} {exc.status} retry-after {exc.headers['retry-after']}")

        held = [asyncio.create_task(search("key:a", n)) for n in ("a1", "a2")]
        await asyncio.sleep(0.01)
        await search("key:a", "a3")  # waited for a place of its own, then refused
        other = asyncio.create_task(search("key:b", "b1"))  # another caller is not held up
        await asyncio.sleep(0.01)
        waiting = asyncio.create_task(search("key:a", "a4"))  # a place frees in time: it runs
        await asyncio.sleep(0.01)
        release.set()
        await asyncio.gather(*held, other, waiting)
        assert not slots._places and not slots._users  # nothing kept for callers gone
        return outcomes

    outcomes = asyncio.run(scenario())
    assert outcomes[:4] == ["a1 runs", "a2 runs", "a3 429 retry-after 1", "b1 runs"]
    assert outcomes[-1] == "a4 runs"
    with pytest.raises(ValueError):
        CallerSlots(-1, 1)


def test_filtered_queue_answers_429_when_full():
    async def scenario():
        queue = FilteredQueue(running=1, queued=1, retry_after_s=7)
        release = asyncio.Event()
        outcomes = []

        async def query(name):
            try:
                async with queue.slot():
                    outcomes.append(f"{name} runs")
                    await release.wait()
            except errors.GatewayError as exc:
                outcomes.append(f"{name} {exc.status} retry-after {exc.headers['retry-after']}")

        tasks = [asyncio.create_task(query(n)) for n in ("first", "second", "third")]
        await asyncio.sleep(0.01)
        release.set()
        await asyncio.gather(*tasks)
        return outcomes

    assert asyncio.run(scenario()) == ["first runs", "third 429 retry-after 7", "second runs"]


# --- the app in process --------------------------------------------------------


def app_client(transport=None, es=None, **gateway):
    settings = Settings(es_url="http://gateway:own-secret@es.internal:9200", gateway=GatewaySettings(**gateway))
    app = create_app(
        settings,
        es=es or FakeElasticsearch(),
        embedder=FakeEmbedder(),
        model=FakeModel(),
        judge_many_factory=judge_factory,
        http_transport=transport or RecordingTransport(es_reply),
    )
    return TestClient(app)


def sent_authorization(transport):
    return [headers.get(b"authorization") for _, _, headers, _ in transport.requests]


class RecordingElasticsearch(FakeElasticsearch):
    """Records the headers each search was made with (``options``)."""

    def __init__(self, headers=None, log=None):
        super().__init__()
        self.headers, self.log = headers or {}, log if log is not None else []

    def options(self, headers):
        return RecordingElasticsearch({**self.headers, **headers}, self.log)

    def msearch(self, searches):
        self.log.append(self.headers.get("authorization"))
        return super().msearch(searches)

    def search(self, index, body):
        # The fetch of the chunks fusion kept: with the same credentials.
        self.log.append(self.headers.get("authorization"))
        return super().search(index, body)


def test_forward_mode_sends_each_callers_credentials_everywhere():
    transport, es = RecordingTransport(es_reply), RecordingElasticsearch()
    client = app_client(transport, es=es)
    alice, bob = basic("alice", "pw-a"), basic("bob", "pw-b")
    client.post("/docs/_search", json={"query": {"match_all": {}}}, headers={"authorization": alice.decode()})
    client.post("/docs/_count", headers={"authorization": bob.decode()})
    client.head("/docs")
    assert sent_authorization(transport) == [alice, bob, None]  # never the gateway's own
    filtered = client.post(
        "/docs/_search",
        json={"query": {"match": {"text": "a"}}, "ext": {"chunkrag": {}}},
        headers={"authorization": bob.decode()},
    )
    retrieval_only = client.post(
        "/v1/ask",
        json={"index": "docs", "question": "a", "options": {"stages": False}},
        headers={"authorization": alice.decode()},
    )
    anonymous = client.post("/v1/ask", json={"index": "docs", "question": "a", "options": {"stages": False}})
    assert filtered.status_code == retrieval_only.status_code == anonymous.status_code == 200
    # Each search is an _msearch, then the fetch of the chunks fusion kept.
    assert es.log == [bob.decode(), bob.decode(), alice.decode(), alice.decode(), None, None]


class KeyMakingTransport(RecordingTransport):
    """Answers POST /_security/api_key with a derived key named after the gateway key."""

    def __init__(self, respond=es_reply, create_status=200):
        super().__init__(respond)
        self.create_status = create_status

    async def request(self, method, target, headers, body):
        if target == "/_security/api_key" and method == "POST":
            self.requests.append((method, target, dict(headers), body))
            name = orjson.loads(body)["metadata"]["chunkrag_gateway_key"]
            answer = {"id": f"id-{name}", "encoded": f"derived-{name}"}
            if self.create_status != 200:
                answer = {"error": "no handler found"}
            return HttpResponse(self.create_status, (), orjson.dumps(answer))
        return await super().request(method, target, headers, body)


def test_service_mode_searches_with_a_derived_key_per_gateway_key():
    transport, es = KeyMakingTransport(), RecordingElasticsearch()
    client = app_client(transport, es=es, auth="service", api_keys=KEYS)
    assert client.post("/docs-1/_search", json={}).status_code == 401
    assert client.post("/docs-1/_search", json={}, headers={"authorization": f"ApiKey {KEY_A}x"}).status_code == 401
    team = {"authorization": f"ApiKey {KEY_A}"}
    assert client.post("/docs-1/_search", json={}, headers=team).status_code == 200
    assert client.post("/docs-1/_count", json={}, headers=team).status_code == 200
    created, first, second = transport.requests
    assert created[1] == "/_security/api_key" and created[2][b"authorization"] == basic("gateway", "own-secret")
    descriptor = orjson.loads(created[3])["role_descriptors"]["chunkrag_gateway_key"]
    grants = [{"names": ["docs-*", "faq"], "privileges": ["read", "view_index_metadata"]}]
    assert descriptor == {"cluster": [], "indices": grants}
    # made once, then cached; neither the gateway key nor the service account's credentials reach a search
    assert first[2][b"authorization"] == second[2][b"authorization"] == b"ApiKey derived-team-a"
    body = {"query": {"match": {"text": "a"}}, "ext": {"chunkrag": {"stages": False}}}
    filtered = client.post("/docs-1/_search", json=body, headers=team)
    assert filtered.status_code == 200 and es.log == ["ApiKey derived-team-a"] * 2
    transport.requests.clear()
    forbidden = client.post("/logs/_search", json={}, headers=team)
    assert forbidden.status_code == 403 and "may not read index [logs]" in forbidden.json()["error"]["reason"]
    assert (
        client.post(
            "/logs/_search", json={"query": {"match": {"text": "a"}}, "ext": {"chunkrag": {}}}, headers=team
        ).status_code
        == 403
    )
    assert client.post("/v1/ask", json={"index": "logs", "question": "a"}, headers=team).status_code == 403
    assert (
        client.post(
            "/v1/ask", json={"index": "faq", "question": "a", "options": {"stages": False}}, headers=team
        ).status_code
        == 200
    )
    assert client.get("/_count", headers=team).status_code == 403  # all indices
    msearch = b'{"index":"docs-1"}\n{}\n{"index":"logs"}\n{}\n'
    assert (
        client.post("/_msearch", content=msearch, headers={**team, "content-type": "application/x-ndjson"}).status_code
        == 403
    )
    assert (
        client.post(
            "/_msearch",
            content=msearch.replace(b"logs", b"faq"),
            headers={**team, "content-type": "application/x-ndjson"},
        ).status_code
        == 200
    )
    assert client.post("/_search", json={"query": {"match_all": {}}}, headers=team).status_code == 403
    # An id this gateway did not hand out to the key is a missing context (context_ids.py).
    assert client.post("/_search", json={"pit": {"id": "abc"}}, headers=team).status_code == 404
    assert client.post("/_search/scroll", json={"scroll_id": "abc"}, headers=team).status_code == 404
    ops = {"authorization": f"Bearer {KEY_B}"}
    assert client.get("/_count", headers=ops).status_code == 200
    # the public paths need no key
    assert client.get("/openapi.json").status_code == 200


def test_service_mode_without_cluster_security_needs_an_explicit_choice():
    refused = app_client(KeyMakingTransport(create_status=400), auth="service", api_keys=KEYS)
    answer = refused.post("/docs-1/_search", json={}, headers={"authorization": f"ApiKey {KEY_A}"})
    assert answer.status_code == 503 and "ENFORCE_IN_GATEWAY_ONLY" in answer.json()["error"]["reason"]
    transport = KeyMakingTransport(create_status=400)
    accepted = app_client(transport, auth="service", api_keys=KEYS, enforce_in_gateway_only=True)
    assert accepted.post("/docs-1/_search", json={}, headers={"authorization": f"ApiKey {KEY_A}"}).status_code == 200
    assert transport.requests[-1][2][b"authorization"] == basic("gateway", "own-secret")
    assert accepted.post("/logs/_search", json={}, headers={"authorization": f"ApiKey {KEY_A}"}).status_code == 403


def test_service_mode_without_manage_own_api_key_is_a_503_naming_no_account():
    client = app_client(KeyMakingTransport(create_status=403), auth="service", api_keys=KEYS)
    answer = client.post("/docs-1/_search", json={}, headers={"authorization": f"ApiKey {KEY_A}"})
    assert answer.status_code == 503 and "manage_own_api_key" in answer.json()["error"]["reason"]


def test_cluster_refusals_in_service_mode_are_the_gateways_words():
    def refusing(method, target):
        reason = b"unauthorized for user [gateway-service] with roles [gateway_reader]"
        return HttpResponse(403, (), b'{"error":{"type":"security_exception","reason":"' + reason + b'"},"status":403}')

    client = app_client(KeyMakingTransport(refusing), auth="service", api_keys=KEYS)
    answer = client.post("/docs-1/_search", json={}, headers={"authorization": f"ApiKey {KEY_A}"})
    assert answer.status_code == 403 and "gateway-service" not in answer.text and "gateway_reader" not in answer.text
    assert "gateway API key [team-a]" in answer.json()["error"]["reason"]

    def msearch_item(method, target):
        item = b'{"error":{"type":"security_exception","reason":"user [gateway-service]"},"status":403}'
        return HttpResponse(200, (), b'{"responses":[' + item + b"]}")

    client = app_client(KeyMakingTransport(msearch_item), auth="service", api_keys=KEYS)
    ndjson = {"authorization": f"ApiKey {KEY_A}", "content-type": "application/x-ndjson"}
    answer = client.post("/docs-1/_msearch", content=b"{}\n{}\n", headers=ndjson)
    assert answer.status_code == 200 and "gateway-service" not in answer.text and "team-a" in answer.text


def test_writes_and_cluster_apis_are_refused_unless_configured():
    transport = RecordingTransport(es_reply)
    client = app_client(transport)
    refused = client.put("/docs/_doc/1", json={"a": 1})
    assert (
        refused.status_code == 403
        and "write API" in refused.json()["error"]["reason"]
        and "CHUNKRAG_GATEWAY_PASSTHROUGH" in refused.json()["error"]["reason"]
    )
    assert (
        client.get("/_cluster/health").status_code == 403 and client.post("/_bulk", content=b"{}\n").status_code == 403
    )
    assert transport.requests == []
    writer = app_client(transport, passthrough="read,write")
    assert (
        writer.put("/docs/_doc/1", json={"a": 1}).status_code == 200
        and writer.get("/_cluster/health").status_code == 403
    )
    assert app_client(transport, passthrough="all").get("/_cluster/health").status_code == 200


def test_chunkrag_where_it_cannot_be_served_is_a_clear_400():
    transport = RecordingTransport(es_reply)
    client = app_client(transport)
    index_less = client.post("/_search", json={"query": {"match": {"text": "x"}}, "ext": {"chunkrag": {}}})
    assert index_less.status_code == 400 and "needs an index in the path" in index_less.json()["error"]["reason"]
    msearch = client.post(
        "/docs/_msearch",
        content=b'{}\n{"query":{"match_all":{}},"ext":{"chunkrag":{}}}\n',
        headers={"content-type": "application/x-ndjson"},
    )
    assert msearch.status_code == 400 and "not supported in _msearch" in msearch.json()["error"]["reason"]
    assert transport.requests == []
    # the word alone still passes
    assert client.post("/_search", json={"query": {"match": {"text": "chunkrag"}}}).status_code == 200


def test_query_length_and_rate_limits():
    client = app_client(max_query_chars=10)
    long = client.post("/docs/_search", json={"query": {"match": {"text": "x" * 11}}, "ext": {"chunkrag": {}}})
    assert long.status_code == 400 and "limit is 10" in long.json()["error"]["reason"]
    nul = client.post("/v1/ask", json={"index": "docs", "question": "a\u0000b"})
    assert nul.status_code == 400 and "NUL" in nul.json()["error"]["reason"]
    limited = app_client(rate_per_s=0.001, rate_burst=2)
    statuses = [limited.post("/docs/_count").status_code for _ in range(3)]
    assert statuses[:2] == [200, 200] and statuses[2] == 429
    last = limited.post("/docs/_count")
    assert last.json()["error"]["type"] == "es_rejected_execution_exception" and int(last.headers["retry-after"]) >= 1


def test_service_mode_limits_requests_without_a_valid_key_by_address():
    limited = app_client(KeyMakingTransport(), auth="service", api_keys=KEYS, rate_per_s=0.001, rate_burst=2)
    attempts = [{}, {"authorization": "ApiKey guess-1"}, {"authorization": "Bearer guess-2"}, {}]
    statuses = [limited.post("/docs-1/_count", headers=headers).status_code for headers in attempts]
    assert statuses == [401, 401, 429, 429]
    # A valid key has a bucket of its own.
    assert limited.post("/docs-1/_count", headers={"authorization": f"ApiKey {KEY_A}"}).status_code == 200
    # The routes anyone may call share the address's bucket (/v1/health asks the cluster each time).
    assert limited.get("/v1/health").status_code == 429 and limited.get("/openapi.json").status_code == 429
    open_health = app_client(KeyMakingTransport(), auth="service", api_keys=KEYS)  # no rate limit: never refused
    assert all(open_health.get("/openapi.json").status_code == 200 for _ in range(30))


def test_misconfiguration_fails_at_creation():
    with pytest.raises(ConfigError):
        create_app(Settings(gateway=GatewaySettings(auth="service")))
    with pytest.raises(ValueError, match="PASSTHROUGH"):
        create_app(Settings(gateway=GatewaySettings(passthrough="everything")))


def test_the_score_cache_holds_a_hash_and_a_number_never_text():
    from workers.score_cache import RedisScoreCache

    class Store:
        def __init__(self):
            self.data = {}

        def set(self, key, value, ex=None):
            self.data[key] = value

        def get(self, key):
            return self.data.get(key)

    store = Store()
    cache = RedisScoreCache(store)
    secret = "model|listwise|what is the salary of alice|Alice earns 90k a year|base"
    cache.set(secret, 0.75)
    ((key, value),) = store.data.items()
    assert key == "chunkrag:score:" + hashlib.sha256(secret.encode()).hexdigest() and value == "0.75"
    assert "alice" not in key.lower() and cache.get(secret) == 0.75


@pytest.mark.parametrize(
    "path",
    ["/docs-1/../logs/_search", "/docs-1/%2e%2e/logs/_search", "//logs/_search", "/./_search", "/docs/%2E/_search?q=1"],
)
def test_paths_a_server_might_normalise_are_refused(path):
    from chunkrag_gateway.policy import refuse_odd_paths

    with pytest.raises(errors.GatewayError, match="plain paths"):
        refuse_odd_paths(path)
    refuse_odd_paths("/docs-1/_search?q=a/../b")  # the query string is not a path
    refuse_odd_paths("/docs-1/")


def test_an_encoded_dot_segment_never_reaches_the_cluster():
    transport = RecordingTransport(es_reply)
    refused = app_client(transport, passthrough="all").post("/docs-1/%2e%2e/logs/_search", json={})
    assert (
        refused.status_code == 400 and "plain paths" in refused.json()["error"]["reason"] and transport.requests == []
    )


@pytest.mark.parametrize(
    "raw, named", [({"budget_s": 1.7e307}, "budget_s"), ({"scoring": {"weights": [1e300, 1e300, 0]}}, "weights")]
)
def test_numbers_that_overflow_downstream_are_refused(raw, named):
    # Found by the fuzzer: a budget of 1.7e307 s overflowed the clock (a 500).
    from chunkrag_gateway.dialect import OptionError, parse_options

    with pytest.raises(OptionError, match=named):
        parse_options(raw, max_candidates=50)


@pytest.mark.parametrize("api", ["_search_shards", "_segments", "_recovery", "_shard_stores"])
def test_index_apis_that_answer_with_the_nodes_are_cluster_apis(api):
    # Node names, ids and transport addresses: cluster topology, not an index's data.
    endpoint = classify("GET", f"/docs/{api}")
    assert (endpoint.kind, endpoint.indices) == ("cluster", ("docs",))
