"""The gateway against the real secured Elasticsearch (tests/support/
secured_elasticsearch.py) on what a second attack still found: headers a
caller should not set reaching the cluster, stack traces (error_trace),
refusals quoted inside _validate and _explain answers, a body whose
Content-Encoding lies, legitimate requests refused (an index exclusion, a
deep body the cluster itself takes), and callers without a key never rate
limited. Each case is compared with what the cluster does straight where
that tells something."""

from __future__ import annotations

import gzip
import json
import os
import re
import selectors
import socket
import threading
import time
import zlib
from urllib.parse import urlsplit

import httpx
import pytest

from chunkrag_gateway import create_app
from chunkrag_gateway.identity import key_hash
from chunkrag_gateway.server import serve_in_thread as serving

# The secured node, its indices and the gateways, shared with the other secured-node tests.
from tests.integration.test_gateway_attacks import ACCOUNT_WORDS, ADMIN, ALICE, assert_no_secret, lookup
from tests.integration.test_gateway_secured import (  # noqa: F401
    admin,
    gateway_settings,
    indices,
    model_server,
    secured_node,
)
from tests.integration.test_gateway_service_mode import (  # noqa: F401
    QUERY,
    SECRET_TEXT,
    TEAM_KEY,
    TRUSTED_KEY,
    forwarding,
    raw,
    secret_document,
    service_gateway,
    service_settings,
)
from tests.support import secured_elasticsearch as secured
from tests.support.flood import flooding
from tests.support.recording_relay import recording_relay

pytestmark = pytest.mark.integration

# Headers only the cluster's own components, a proxy in front of it or a CDN should set.
CALLER_ONLY_HEADERS = (
    "x-elastic-product-origin",
    "x-elastic-internal-origin",
    "x-found-handling-cluster",
    "x-elastic-app-auth",
    "x-http-method-override",
    "x-rewrite-url",
    "cf-connecting-ip",
    "x-cluster-client-ip",
    "run-as",
)


def _spellings(name: str) -> list[str]:
    return [name, name.upper(), name.title(), name.replace("-", "_")]


def _header_names(sent: bytes) -> set[str]:
    """Every header name in the requests a relay recorded, lower case."""
    names = set()
    for line in sent.split(b"\r\n"):
        if b":" in line and not line.startswith((b"GET ", b"POST ", b"{")):
            names.add(line.split(b":", 1)[0].strip().lower().decode("latin-1"))
    return names


def test_headers_a_caller_should_not_set_never_reach_the_cluster(settings, embedder, indices):  # noqa: F811
    allowed, _ = indices
    node = urlsplit(secured.url_for())
    with recording_relay(node.hostname, node.port) as relay:
        es_url = f"http://{secured.SERVICE.name}:{secured.SERVICE.password}@127.0.0.1:{relay.port}"
        forward = create_app(gateway_settings(settings, es_url), embedder=embedder)
        team = f"team:{key_hash(TEAM_KEY)}:{secured.ALLOWED_PREFIX}*"
        service = create_app(gateway_settings(settings, es_url, auth="service", api_keys=team), embedder=embedder)
        sent_headers = [(spelling, "1") for name in CALLER_ONLY_HEADERS for spelling in _spellings(name)]
        sent_headers += [("x-opaque-id", "trace-me"), ("traceparent", "00-" + "1" * 32 + "-" + "2" * 16 + "-01")]
        with serving(forward) as forward_url, serving(service) as service_url:
            for url, auth in ((forward_url, ALICE), (service_url, {"authorization": f"ApiKey {TEAM_KEY}"})):
                answer = httpx.post(
                    f"{url}/{allowed}/_search",
                    headers=[*auth.items(), *sent_headers],
                    json={"query": {"match_all": {}}},
                    timeout=30,
                )
                assert answer.status_code == 200, answer.text[:300]
        reached = _header_names(relay.sent_bytes())
    assert {"x-opaque-id", "traceparent"} <= reached, reached
    leaked = {spelling.lower() for name in CALLER_ONLY_HEADERS for spelling in _spellings(name)} & reached
    assert not leaked, leaked


BAD_RANGE = {"query": {"range": {"position": {"gte": "not a number"}}}}


def test_error_trace_never_brings_the_clusters_stack_traces(service_gateway, forwarding, indices):  # noqa: F811
    url, _ = service_gateway
    allowed, _ = indices
    straight = httpx.post(f"{secured.url_for()}/{allowed}/_search?error_trace=true", headers=ADMIN, json=BAD_RANGE)
    assert straight.status_code == 400 and "stack_trace" in straight.text  # what the cluster would hand out
    for query in ("?error_trace=true", "?error_trace", "?%65rror_trace=true", "?pretty&error_trace=true"):
        for answer in (
            raw(url, "POST", f"/{allowed}/_search{query}", TEAM_KEY, json=BAD_RANGE),
            httpx.post(f"{forwarding}/{allowed}/_search{query}", headers=ALICE, json=BAD_RANGE, timeout=30),
        ):
            assert answer.status_code == 400, (query, answer.status_code, answer.text[:300])
            assert "stack_trace" not in answer.text and "org.elasticsearch" not in answer.text, (
                query,
                len(answer.text),
            )
            assert "query_shard_exception" in answer.text or "search_phase_execution_exception" in answer.text


def test_refusals_inside_validate_and_explain_answers_are_reworded(settings, embedder, indices, secret_document):  # noqa: F811
    """Every endpoint class passes: _validate/query and _explain run a
    terms lookup of the secret index with the team's derived key, and the
    cluster's refusal comes back inside a 200 (the validation's error text)."""
    allowed, other = indices
    with serving(create_app(service_settings(settings, passthrough="all"), embedder=embedder)) as url:
        body = {"query": lookup(other, secret_document)}
        for method, path in (
            ("POST", f"/{allowed}/_validate/query?explain=true"),
            ("GET", f"/{allowed}/_validate/query?explain=true&all_shards=true"),
            ("POST", f"/{allowed}/_validate/query?explain=true&rewrite=true"),
            ("POST", f"/{allowed}/_validate/query?explain=true&filter_path=explanations.error"),
            ("POST", f"/{allowed}/_explain/tokyo:0"),
            ("POST", f"/{allowed}/_explain/tokyo:0?filter_path=**.reason"),
        ):
            answer = raw(url, method, path, TEAM_KEY, json=body)
            assert_no_secret(answer, path)
            assert not any(word in answer.text for word in ACCOUNT_WORDS), (path, answer.text[:300])


JAVA_NAMES = re.compile(r"[A-Z][a-z]+(?:[A-Z][a-z]+)*(?:Exception|Error)\b|\b(?:org|java)\.[a-z]")


def test_errors_name_no_java_class_nor_the_clusters_ids_in_service_mode(settings, embedder, indices, admin):  # noqa: F811
    """With every class passed, _validate/query?explain=true answered with
    ParsingException, NumberFormatException and the index's uuid; a bad
    search with index_uuid and the node's id. Through the gateway in service
    mode none of it, and the errors still say what is wrong; forward mode
    answers as the cluster does."""
    allowed, _ = indices
    index_uuid = admin.indices.get_settings(index=allowed)[allowed]["settings"]["index"]["uuid"]
    node_id = next(iter(admin.nodes.info(node_id="_local")["nodes"]))
    asked = [
        ("POST", f"/{allowed}/_validate/query?explain=true", BAD_RANGE, "number_format_exception"),
        ("POST", f"/{allowed}/_validate/query?explain=true&all_shards=true", BAD_RANGE, "number_format_exception"),
        ("POST", f"/{allowed}/_validate/query?explain=true&rewrite=true", BAD_RANGE, "number_format_exception"),
        ("POST", f"/{allowed}/_validate/query?explain=true", {"query": {"nope": {}}}, "unknown query [nope]"),
        ("POST", f"/{allowed}/_search", BAD_RANGE, "query_shard_exception"),
        ("POST", f"/{allowed}/_count", BAD_RANGE, "query_shard_exception"),
        ("POST", f"/{allowed}/_explain/tokyo:0", BAD_RANGE, "query_shard_exception"),
    ]
    straight = httpx.post(f"{secured.url_for()}/{allowed}/_validate/query?explain=true", headers=ADMIN, json=BAD_RANGE)
    assert JAVA_NAMES.search(straight.text) and index_uuid in straight.text  # what the cluster hands out
    with serving(create_app(service_settings(settings, passthrough="all"), embedder=embedder)) as url:
        for method, path, body, still_said in asked:
            answer = raw(url, method, path, TEAM_KEY, json=body)
            assert answer.status_code in (200, 400), (path, answer.status_code, answer.text[:300])
            assert not JAVA_NAMES.search(answer.text), (path, answer.text[:500])
            assert index_uuid not in answer.text and node_id not in answer.text, (path, answer.text[:500])
            assert still_said in answer.text, (path, answer.text[:500])
        # A filtered search whose filter is bad: the cluster's error through the library, scrubbed the same way.
        bad_filter = {"bool": {"must": QUERY, "filter": [BAD_RANGE["query"]]}}
        body = {"query": bad_filter, "ext": {"chunkrag": {"stages": False}}}
        filtered = raw(url, "POST", f"/{allowed}/_search", TEAM_KEY, json=body)
        assert filtered.status_code == 400 and "query_shard_exception" in filtered.text, filtered.text[:500]
        assert not JAVA_NAMES.search(filtered.text) and index_uuid not in filtered.text, filtered.text[:500]
    forwarded = create_app(gateway_settings(settings, secured.url_for(secured.SERVICE), passthrough="all"))
    with serving(forwarded) as url:
        answer = httpx.post(f"{url}/{allowed}/_validate/query?explain=true", headers=ALICE, json=BAD_RANGE)
        assert index_uuid in answer.text  # the cluster's own words: the caller is the cluster's user


def test_a_body_whose_content_encoding_lies_is_a_400_naming_it(service_gateway, forwarding, indices):  # noqa: F811
    url, _ = service_gateway
    allowed, _ = indices
    body = json.dumps({"size": 1, "query": {"match_all": {}}}).encode()
    lying = [("deflate", gzip.compress(body)), ("gzip", zlib.compress(body)), ("x-gzip", body), ("snappy", body)]
    for coding, content in lying:
        headers = {"content-encoding": coding, "content-type": "application/json"}
        for answer in (
            httpx.post(f"{forwarding}/{allowed}/_search", headers={**ALICE, **headers}, content=content, timeout=30),
            raw(url, "POST", f"/{allowed}/_search", TEAM_KEY, content=content, headers=headers),
        ):
            assert answer.status_code == 400, (coding, answer.status_code, answer.text[:300])
            assert f"[{coding}]" in answer.text or "not strict JSON" in answer.text, (coding, answer.text[:300])
    # Honest codings still work where the gateway forwards bodies it does not read (forward mode).
    for coding, content in (("gzip", gzip.compress(body)), ("deflate", zlib.compress(body))):
        answer = httpx.post(
            f"{forwarding}/{allowed}/_search",
            headers={**ALICE, "content-encoding": coding, "content-type": "application/json"},
            content=content,
            timeout=30,
        )
        assert answer.status_code == 200 and len(answer.json()["hits"]["hits"]) == 1, (coding, answer.text[:300])


def test_an_exclusion_after_an_allowed_pattern_is_accepted(service_gateway, indices):  # noqa: F811
    url, _ = service_gateway
    allowed, other = indices
    for path in (
        f"/{secured.ALLOWED_PREFIX}*,-nothing/_count",
        f"/{allowed},-nothing/_count",
        f"/{secured.ALLOWED_PREFIX}*,-{secured.ALLOWED_PREFIX}none*/_count",
    ):
        answer = raw(url, "GET", path, TEAM_KEY)
        assert answer.status_code == 200 and answer.json()["count"] >= 6, (path, answer.text[:300])
    answer = raw(url, "GET", f"/{allowed},-{allowed}/_count", TEAM_KEY)
    assert answer.status_code == 200 and answer.json()["count"] == 0
    # An exclusion widens nothing: a secret index beside it, or an exclusion alone, is still refused.
    for path in (f"/{allowed},-nothing,{other}/_count", f"/-{allowed}/_count", "/-nothing/_count"):
        answer = raw(url, "GET", path, TEAM_KEY)
        assert answer.status_code == 403, (path, answer.status_code)
        assert_no_secret(answer, path)


def _bool_chain(depth: int) -> dict:
    query = {"match_all": {}}
    for _ in range(depth):
        query = {"bool": {"must": [query]}}
    return {"query": query}


def _aggregation_chain(depth: int) -> dict:
    aggregations = {"f0": {"filter": {"match_all": {}}}}
    for level in range(1, depth):
        aggregations = {f"f{level}": {"filter": {"match_all": {}}, "aggs": aggregations}}
    return {"size": 0, "aggs": aggregations}


def _post_json(url: str, body: dict, headers: dict) -> httpx.Response:
    # json.dumps: orjson (httpx's json= is json too) writes at most 255 levels, these go deeper.
    content = json.dumps(body).encode()
    return httpx.post(url, content=content, headers={**headers, "content-type": "application/json"}, timeout=60)


def test_the_gateway_takes_the_deep_bodies_the_cluster_takes(service_gateway, forwarding, indices):  # noqa: F811
    """A 100-deep bool chain (302 levels of JSON) is the cluster's to
    answer (its indices.query.bool.max_nested_depth); a 150-deep chain of
    aggregations (300 levels) the cluster answers with a 200. Through the
    gateway, in both modes, each gets what it gets from the cluster straight."""
    url, _ = service_gateway
    allowed, _ = indices
    key = {"authorization": f"ApiKey {TEAM_KEY}"}
    for body in (_bool_chain(100), _bool_chain(20), _aggregation_chain(150)):
        straight = _post_json(f"{secured.url_for()}/{allowed}/_search", body, ADMIN)
        for answer in (
            _post_json(f"{url}/{allowed}/_search", body, key),
            _post_json(f"{forwarding}/{allowed}/_search", body, ALICE),
        ):
            assert answer.status_code == straight.status_code, (answer.status_code, answer.text[:300])
            if straight.status_code != 200:
                assert answer.json()["error"]["type"] == straight.json()["error"]["type"]
                assert "max_nested_depth" in answer.text, answer.text[:300]
    # Past the cluster's own parser limit (1,000 levels) both refuse.
    too_deep = b'{"query":' + b"[" * 1001 + b"]" * 1001 + b"}"
    for target, headers in ((f"{secured.url_for()}/{allowed}/_search", ADMIN), (f"{url}/{allowed}/_search", key)):
        answer = httpx.post(target, content=too_deep, headers={**headers, "content-type": "application/json"})
        assert answer.status_code == 400, (target, answer.text[:300])


def test_callers_without_a_key_are_rate_limited_by_address(settings, embedder, indices):  # noqa: F811
    allowed, _ = indices
    limited = service_settings(settings, rate_per_s=0.001, rate_burst=2)
    with serving(create_app(limited, embedder=embedder)) as url:
        statuses = [
            httpx.get(f"{url}/{allowed}/_count", headers=headers, timeout=30).status_code
            for headers in (
                {},
                {"authorization": "ApiKey not-a-key"},
                {"authorization": "ApiKey another-guess"},
                {"x-forwarded-for": "10.9.9.9"},
            )
        ]
        assert statuses == [401, 401, 429, 429]
        refused = httpx.get(f"{url}/{allowed}/_count", timeout=30)
        assert refused.status_code == 429 and int(refused.headers["retry-after"]) >= 1
        # The routes anyone may call count against the address too (/v1/health asks the cluster).
        assert httpx.get(f"{url}/v1/health", timeout=30).status_code == 429
        # A caller with a key has a bucket of its own.
        answer = raw(url, "GET", f"/{allowed}/_count", TEAM_KEY)
        assert answer.status_code == 200 and answer.json()["count"] == 6


def _percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))]


def _plain_latencies(url: str, index: str, key: str, count: int) -> list[float]:
    with httpx.Client(headers={"authorization": f"ApiKey {key}"}, timeout=60) as client:
        latencies = []
        for _ in range(count):
            started = time.perf_counter()
            answer = client.post(f"{url}/{index}/_search", json={"query": QUERY, "size": 3})
            latencies.append(time.perf_counter() - started)
            assert answer.status_code == 200, answer.text[:300]
    return latencies


def test_one_keys_filtered_searches_do_not_starve_a_normal_caller(settings, indices):  # noqa: F811
    """16 threads of one key (in another process) send filtered searches (50
    candidates, ensembling) without pause while another key's plain searches are timed,
    and timed before, quiet, in the same test. Two of the key's searches run
    at once, in the gateway's filter processes (CHUNKRAG_GATEWAY_FILTER_PROCESSES,
    nothing handed to create_app; the derived key travels with each search);
    the others wait for one of those, and past Retry-After get a 429 with it.
    The figures are printed with the load average (a ratio on a shared
    machine is a report, not an assertion; bench/results/fairness.json records it)."""
    allowed, _ = indices
    flood_body = {"query": QUERY, "size": 5, "ext": {"chunkrag": {"candidates": 50, "ensemble": True}}}
    # A refused search first waits Retry-After (here 1 s) for a place of its caller's own.
    gateway = create_app(service_settings(settings, retry_after_s=1, filter_processes=True))
    assert gateway.state.filter_processes is not None
    with serving(gateway) as url:
        first = raw(url, "POST", f"/{allowed}/_search", TEAM_KEY, json=flood_body)
        if first.status_code == 400 and "scale" in first.text:  # an index made without the other scales
            flood_body["ext"]["chunkrag"].pop("ensemble")
            first = raw(url, "POST", f"/{allowed}/_search", TEAM_KEY, json=flood_body)
        assert first.status_code == 200, first.text[:300]
        _plain_latencies(url, allowed, TRUSTED_KEY, 20)  # warm
        quiet = _plain_latencies(url, allowed, TRUSTED_KEY, 150)
        flood = flooding(f"{url}/{allowed}/_search", {"authorization": f"ApiKey {TEAM_KEY}"}, flood_body, threads=16)
        with flood as outcomes:
            time.sleep(3.0)  # the child process starts and the flood builds up
            loaded = _plain_latencies(url, allowed, TRUSTED_KEY, 150)
    statuses = [status for status, _ in outcomes]
    figures = {
        "quiet_p50_ms": round(_percentile(quiet, 0.5) * 1000, 2),
        "quiet_p95_ms": round(_percentile(quiet, 0.95) * 1000, 2),
        "flooded_p50_ms": round(_percentile(loaded, 0.5) * 1000, 2),
        "flooded_p95_ms": round(_percentile(loaded, 0.95) * 1000, 2),
        "flood_200": statuses.count(200),
        "flood_429": statuses.count(429),
    }
    figures["p95_ratio"] = round(figures["flooded_p95_ms"] / figures["quiet_p95_ms"], 2)
    figures["load_average"] = [round(load, 2) for load in os.getloadavg()]
    print("filtered flood against plain searches:", figures)
    assert statuses.count(200) >= 1 and set(statuses) <= {200, 429}, figures
    # Whether any were shed depends on the machine: where the key's searches end
    # within Retry-After, each waiting one gets its place and none is refused
    # (the shedding itself: tests/unit/test_gateway_security.py, CallerSlots).
    assert all(retry is not None and int(retry) >= 1 for status, retry in outcomes if status == 429)


def test_an_alias_matching_a_keys_pattern_exposes_its_target_unless_refused(
    settings,
    embedder,
    indices,  # noqa: F811
    admin,  # noqa: F811
    secret_document,  # noqa: F811
):
    """The cluster lets a key for sec-docs-* read an alias sec-docs-… that
    points to a secret index (its privileges match names too): documented,
    and refused with CHUNKRAG_GATEWAY_REFUSE_FOREIGN_ALIASES, by name, by a
    wildcard that reaches it, in an _msearch header and in /v1/ask."""
    allowed, other = indices
    alias = f"{secured.ALLOWED_PREFIX}alias-{other.rsplit('-', 1)[-1]}"
    admin.indices.put_alias(index=other, name=alias)
    try:
        with serving(create_app(service_settings(settings), embedder=embedder)) as url:
            exposed = raw(url, "POST", f"/{alias}/_search", TEAM_KEY, json={"query": {"match_all": {}}, "size": 50})
            assert exposed.status_code == 200 and SECRET_TEXT in exposed.text  # what the docs warn of
        refusing = service_settings(settings, refuse_foreign_aliases=True)
        with serving(create_app(refusing, embedder=embedder)) as url:
            for path in (f"/{alias}/_search", f"/{secured.ALLOWED_PREFIX}*/_search", f"/{allowed},{alias}/_count"):
                answer = raw(url, "POST", path, TEAM_KEY, json={"query": {"match_all": {}}})
                assert answer.status_code == 403 and f"alias [{alias}]" in answer.text, (path, answer.text[:300])
                assert_no_secret(answer, path)
            msearch = f'{{"index":"{alias}"}}\n{{"query":{{"match_all":{{}}}}}}\n'.encode()
            answer = raw(
                url,
                "POST",
                f"/{allowed}/_msearch",
                TEAM_KEY,
                content=msearch,
                headers={"content-type": "application/x-ndjson"},
            )
            assert answer.status_code == 403 and SECRET_TEXT not in answer.text
            by_reference = {"query": {"terms": {"doc_id": {"index": alias, "id": secret_document, "path": "text"}}}}
            answer = raw(url, "POST", f"/{allowed}/_search", TEAM_KEY, json=by_reference)
            assert answer.status_code == 403 and f"alias [{alias}]" in answer.text and SECRET_TEXT not in answer.text
            answer = raw(url, "POST", "/v1/ask", TEAM_KEY, json={"index": alias, "question": "secret?"})
            assert answer.status_code == 403 and SECRET_TEXT not in answer.text
            # The key's own indices, and an exclusion of the alias, are answered as before.
            answer = raw(url, "GET", f"/{allowed}/_count", TEAM_KEY)
            assert answer.status_code == 200 and answer.json()["count"] == 6
    finally:
        admin.indices.delete_alias(index=other, name=alias)


class ConnectionHolder:
    """Connections from many loopback addresses that never finish their
    request: each sends a request line and then a header line every
    ``line_every_s`` (``slow="head"``), or its whole head and then its body a
    byte at a time (``slow="body"``). Closed ones are opened again, at most
    ``opens_per_s`` new ones a second in all, so each address keeps up to
    ``per_address`` open as long as the gateway lets it. Stops by itself
    after ``max_s``."""

    def __init__(self, target, sources, per_address, *, slow, opens_per_s, line_every_s, max_s, path: bytes):
        self.target, self.sources, self.per_address, self.slow = target, sources, per_address, slow
        self.opens_per_s, self.line_every_s = opens_per_s, line_every_s
        self.deadline, self.path = time.monotonic() + max_s, path
        self.stop = threading.Event()
        self.opened = 0
        self.answers: dict[bytes, int] = {}

    def _first_bytes(self) -> bytes:
        if self.slow == "head":
            return b"GET " + self.path + b" HTTP/1.1\r\nhost: x\r\n"
        return (
            b"POST "
            + self.path
            + b" HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: 1000\r\n\r\n"
        )

    def _trickle(self) -> bytes:
        return b"x-slow: 1\r\n" if self.slow == "head" else b" "

    def run(self):
        selector = selectors.DefaultSelector()
        open_by_source = dict.fromkeys(self.sources, 0)
        started = time.monotonic()
        next_line = started + self.line_every_s
        while not self.stop.is_set() and time.monotonic() < self.deadline:
            allowance = int((time.monotonic() - started) * self.opens_per_s) - self.opened
            for source in self.sources:
                while allowance > 0 and open_by_source[source] < self.per_address:
                    allowance -= 1
                    try:
                        sock = socket.socket()
                        sock.bind((source, 0))
                        sock.settimeout(2)
                        sock.connect(self.target)
                        sock.sendall(self._first_bytes())
                        sock.setblocking(False)
                    except OSError:
                        sock.close()
                        break
                    selector.register(sock, selectors.EVENT_READ, source)
                    open_by_source[source] += 1
                    self.opened += 1
            for key, _ in selector.select(timeout=0.01):
                try:
                    data = key.fileobj.recv(65536)
                except (BlockingIOError, ConnectionResetError):
                    data = b""
                if not data:
                    selector.unregister(key.fileobj)
                    key.fileobj.close()
                    open_by_source[key.data] -= 1
                else:
                    status = data[:12].decode("latin-1")
                    self.answers[status] = self.answers.get(status, 0) + 1
            if time.monotonic() >= next_line:
                next_line += self.line_every_s
                for key in list(selector.get_map().values()):
                    try:
                        key.fileobj.send(self._trickle())
                    except OSError:
                        pass
        for key in list(selector.get_map().values()):
            key.fileobj.close()
        selector.close()


@pytest.mark.parametrize("slow", ["head", "body"])
def test_many_addresses_holding_connections_do_not_lock_a_normal_caller_out(settings, embedder, indices, slow):  # noqa: F811
    """20 loopback addresses (127.0.0.2 to 127.0.0.21) each keep up to 15
    connections open that never finish their request (a header line, or a
    body byte, a second), about 100 new ones a second in all, against an
    overall cap of 200; meanwhile a caller on 127.0.0.1 sends 100 requests,
    each on a new connection, and gets at least 95 answers. Bounded: about
    15 s, loopback only, the holders stop by themselves."""
    allowed, _ = indices
    cap = 200
    app = create_app(
        gateway_settings(settings, secured.url_for(secured.SERVICE), max_connections=cap), embedder=embedder
    )
    with serving(app) as url:
        host, port = url.removeprefix("http://").split(":")
        holder = ConnectionHolder(
            (host, int(port)),
            [f"127.0.0.{n}" for n in range(2, 22)],
            15,
            slow=slow,
            opens_per_s=100,
            line_every_s=1.0,
            max_s=40,
            path=f"/{allowed}/_count".encode(),
        )
        thread = threading.Thread(target=holder.run, daemon=True)
        thread.start()
        try:
            time.sleep(3.0)  # the holders fill the cap
            statuses = []
            for _ in range(100):
                try:
                    statuses.append(httpx.get(f"{url}/{allowed}/_count", headers=ALICE, timeout=10).status_code)
                except httpx.TransportError as exc:
                    statuses.append(type(exc).__name__)
        finally:
            holder.stop.set()
            thread.join(30)
    answered = statuses.count(200)
    figures = {
        "answered": answered,
        "of": len(statuses),
        "holders_opened": holder.opened,
        "holders_got": holder.answers,
    }
    print(f"normal caller while 20 addresses hold slow-{slow} connections:", figures)
    assert holder.opened > cap, figures  # the holders wanted more than the cap
    assert answered >= 95, (figures, statuses)
