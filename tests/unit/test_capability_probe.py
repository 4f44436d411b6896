"""The capability probe remembers only what the cluster settled for every
caller: a 401 or a privilege 403 is never taken for "feature absent", the
request that got it is answered conservatively, and the next caller asks
again. Client doubles answer with the real client libraries' exceptions."""

from __future__ import annotations

import elasticsearch
import opensearchpy
from elastic_transport import ApiResponseMeta, HttpHeaders, NodeConfig

from chunkrag_core.engines import probe
from chunkrag_core.engines.elasticsearch import ElasticsearchBackend
from chunkrag_core.engines.errors import EngineRefused
from chunkrag_core.engines.opensearch import OpenSearchBackend

FULL = {"stats": 200, "analyze": 200, "rrf": 200, "linear": 200}
NOBODY = {"stats": 401, "analyze": 401, "rrf": 401, "linear": 401}
# May search (its body parsed), but has no cluster privilege.
READER = {"stats": 403, "analyze": 403, "rrf": 200, "linear": 200}

LICENCE_BODY = {
    "error": {
        "root_cause": [
            {
                "type": "security_exception",
                "reason": "current license is non-compliant for [linear retriever]",
                "license.expired.feature": "linear retriever",
            }
        ],
        "type": "security_exception",
        "reason": "current license is non-compliant for [linear retriever]",
        "license.expired.feature": "linear retriever",
    },
    "status": 403,
}
PRIVILEGE_BODY = {
    "error": {
        "root_cause": [{"type": "security_exception", "reason": "action [cluster:monitor/stats] is unauthorized"}],
        "type": "security_exception",
        "reason": "action [cluster:monitor/stats] is unauthorized for user [alice]",
    },
    "status": 403,
}


def meta(status):
    node = NodeConfig("http", "es", 9200)
    return ApiResponseMeta(status=status, http_version="1.1", headers=HttpHeaders(), duration=0.0, node=node)


def es_error(status, body=None):
    kinds = {400: elasticsearch.BadRequestError, 401: elasticsearch.AuthenticationException}
    kinds.update({403: elasticsearch.AuthorizationException, 404: elasticsearch.NotFoundError})
    body = body or {"error": {"type": "some_exception", "reason": f"answered {status}"}, "status": status}
    return kinds.get(status, elasticsearch.ApiError)(f"answered {status}", meta(status), body)


class ScriptedCluster:
    """An `elasticsearch` client double: each user's answer per question
    (200, or the status to raise), picked by the Authorization header."""

    def __init__(self, users, bodies=None, user=None, log=None):
        self.users, self.bodies, self.user = users, bodies or {}, user
        self.log = log if log is not None else []
        self.cluster, self.indices = self, self

    def options(self, headers):
        return ScriptedCluster(self.users, self.bodies, headers.get("Authorization"), self.log)

    def _answer(self, question, value):
        self.log.append((self.user, question))
        status = self.users[self.user][question]
        if status != 200:
            raise es_error(status, self.bodies.get((self.user, question)))
        return value

    def stats(self, **_):
        return self._answer("stats", {"nodes": {"versions": ["9.5.0"]}})

    def analyze(self, **_):
        return self._answer("analyze", {"tokens": []})

    def search(self, retriever, **_):
        return self._answer(next(iter(retriever)), {"hits": {"hits": []}})


def backend(users, bodies=None):
    cluster = ScriptedCluster(users, bodies)
    return ElasticsearchBackend(cluster), cluster.log


def asked(log, user):
    return [question for who, question in log if who == user]


def test_an_unauthenticated_first_caller_settles_nothing_and_the_next_caller_gets_everything():
    base, log = backend({"anon": NOBODY, "admin": FULL})
    first = base.with_headers({"Authorization": "anon"}).capabilities()
    assert (first.version, first.has_english_analyzer, first.has_rrf_retriever, first.has_linear_retriever) == (
        "unknown",
        False,
        False,
        False,
    )
    assert asked(log, "anon") == ["stats"]  # a 401 stops the probe: the rest would be refused too
    full = base.with_headers({"Authorization": "admin"}).capabilities()
    assert (full.version, full.has_english_analyzer, full.has_rrf_retriever, full.has_linear_retriever) == (
        "9.5.0",
        True,
        True,
        True,
    )
    # Everything is settled now: later callers, whoever they are, ask nothing.
    again = base.with_headers({"Authorization": "anon"}).capabilities()
    assert again == full and asked(log, "anon") == ["stats"] and len(log) == 5


def test_a_low_privilege_callers_refusals_are_not_remembered_but_its_answers_are():
    base, log = backend({"alice": READER, "admin": FULL})
    alice = base.with_headers({"Authorization": "alice"})
    seen = alice.capabilities()
    assert (seen.version, seen.has_english_analyzer, seen.has_rrf_retriever, seen.has_linear_retriever) == (
        "unknown",
        False,
        True,
        True,
    )
    # Her second request asks again what her rights left open, not what she settled.
    alice.capabilities()
    assert asked(log, "alice") == ["stats", "analyze", "rrf", "linear", "stats", "analyze"]
    full = base.with_headers({"Authorization": "admin"}).capabilities()
    assert full.version == "9.5.0" and full.has_english_analyzer and full.has_rrf_retriever
    assert asked(log, "admin") == ["stats", "analyze"]


def test_absent_features_and_licence_refusals_are_settled_for_everyone():
    users = {"admin": {"stats": 200, "analyze": 400, "rrf": 400, "linear": 403}, "alice": READER}
    base, log = backend(users, {("admin", "linear"): LICENCE_BODY})
    caps = base.with_headers({"Authorization": "admin"}).capabilities()
    assert (caps.version, caps.has_english_analyzer, caps.has_rrf_retriever, caps.has_linear_retriever) == (
        "9.5.0",
        False,
        False,
        False,
    )
    assert base.with_headers({"Authorization": "alice"}).capabilities() == caps
    assert asked(log, "alice") == []


def test_a_privilege_refusal_or_a_server_error_is_never_taken_for_absence():
    for status, body in ((403, PRIVILEGE_BODY), (429, None), (503, None), (401, None)):
        users = {"x": {"stats": 200, "analyze": 200, "rrf": 200, "linear": status}, "admin": FULL}
        base, log = backend(users, {("x", "linear"): body})
        assert not base.with_headers({"Authorization": "x"}).capabilities().has_linear_retriever
        assert base.with_headers({"Authorization": "admin"}).capabilities().has_linear_retriever, status
        assert asked(log, "admin") == ["linear"]


def test_which_refusals_settle():
    def refused(status, body=None):
        return EngineRefused("no", engine="Elasticsearch", status=status, body=body)

    assert [probe.settles(refused(status)) for status in (400, 404, 405, 501)] == [True] * 4
    assert [probe.settles(refused(status)) for status in (401, 403, 408, 429, 500, 502, 503)] == [False] * 7
    assert probe.settles(refused(403, LICENCE_BODY))
    assert not probe.settles(refused(403, PRIVILEGE_BODY))
    assert not probe.licence_refusal({"error": "a string"}) and not probe.licence_refusal(None)


class ScriptedOpenSearch:
    """An `opensearch-py` client double: answers by the per-request headers."""

    def __init__(self, users):
        self.users, self.log = users, []
        self.cluster, self.indices = self, self

    def _answer(self, question, headers, value):
        user = (headers or {}).get("Authorization")
        self.log.append((user, question))
        status = self.users[user][question]
        if status != 200:
            raise opensearchpy.TransportError(status, "some_exception", {"error": {"reason": "no"}, "status": status})
        return value

    def stats(self, headers=None, **_):
        return self._answer("stats", headers, {"nodes": {"versions": ["3.5.0"]}})

    def analyze(self, headers=None, **_):
        return self._answer("analyze", headers, {"tokens": []})

    def search(self, headers=None, **_):
        return self._answer("hybrid", headers, {"hits": {"hits": []}})


def test_the_opensearch_probe_remembers_only_what_the_cluster_settled():
    client = ScriptedOpenSearch(
        {"anon": {"stats": 401}, "bob": {"stats": 403, "analyze": 200, "hybrid": 403}, "admin": FULL | {"hybrid": 400}}
    )
    base = OpenSearchBackend(client)
    assert base.with_headers({"Authorization": "anon"}).capabilities().version == "unknown"
    bob = base.with_headers({"Authorization": "bob"}).capabilities()
    assert (bob.version, bob.has_english_analyzer, bob.has_hybrid_query, bob.engine) == (
        "unknown",
        True,
        False,
        "opensearch",
    )
    admin = base.with_headers({"Authorization": "admin"}).capabilities()
    assert (admin.version, admin.has_english_analyzer, admin.has_hybrid_query) == ("3.5.0", True, False)
    assert [question for who, question in client.log if who == "admin"] == ["stats", "hybrid"]
    base.with_headers({"Authorization": "bob"}).capabilities()
    assert len(client.log) == 6  # anon 1, bob 3, admin 2, then nothing left to ask


def test_the_gateway_asks_each_callers_view_rather_than_keeping_the_first_answer():
    from chunkrag_core.settings import Settings
    from chunkrag_gateway.edges import Edges

    base, log = backend({"anon": NOBODY, "admin": FULL})
    edges = Edges(Settings(), es=base)
    first = edges.capabilities("rrf", base.with_headers({"Authorization": "anon"}))
    assert not first.has_rrf_retriever
    assert edges.capabilities("rrf", base.with_headers({"Authorization": "admin"})).has_rrf_retriever
    assert edges.capabilities("bm25", base.with_headers({"Authorization": "anon"})) is None


def test_once_everything_is_settled_every_caller_gets_the_same_object_without_a_request():
    base, log = backend({"admin": FULL, "anon": NOBODY})
    first = base.with_headers({"Authorization": "admin"}).capabilities()
    assert base.with_headers({"Authorization": "anon"}).capabilities() is first is base.capabilities()
    assert len(log) == 4
