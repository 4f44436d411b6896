"""The capability probe against the real secured Elasticsearch node, asked
as the gateway's forward mode asks it (a backend without credentials, each
caller's header on a view): a caller without rights settles nothing, a
low-privilege caller's refused questions are asked again, and a caller with
rights then gets what the cluster really offers."""

from __future__ import annotations

import pytest
from elasticsearch import AuthenticationException, Elasticsearch

from chunkrag_core.engines.elasticsearch import ElasticsearchBackend
from local_services.elasticsearch_node import ES_VERSION
from tests.integration.test_gateway import QUESTION
from tests.integration.test_gateway_secured import (  # noqa: F401 (fixtures)
    admin,
    client_for,
    forwarding_gateway,
    ids,
    indices,
    model_server,
    secured_node,
)
from tests.support import secured_elasticsearch as secured

pytestmark = pytest.mark.integration


def basic(user):
    import base64

    return {"Authorization": "Basic " + base64.b64encode(f"{user.name}:{user.password}".encode()).decode()}


@pytest.fixture
def forward_backend(secured_node):  # noqa: F811
    """What the gateway's forward mode holds: a client with no credentials."""
    backend = ElasticsearchBackend(Elasticsearch(secured.url_for(), request_timeout=60))
    yield backend
    backend.close()


def test_unprivileged_callers_settle_nothing_and_a_privileged_caller_gets_the_full_capabilities(
    forward_backend,
    admin,  # noqa: F811
):
    truth = ElasticsearchBackend(admin).capabilities()  # asked with superuser rights
    assert truth.version == ES_VERSION

    nobody = forward_backend.with_headers({}).capabilities()
    assert nobody.version == "unknown" and not nobody.has_rrf_retriever
    assert dict(forward_backend._probed.settled) == {}  # the 401 settled nothing

    # alice reads sec-docs-* only: no `monitor` (cluster stats), no `manage`
    # (analyze without an index); her searches are parsed, so the retriever
    # questions are the cluster's own answers (this distribution has none).
    alice = forward_backend.with_headers(basic(secured.READER)).capabilities()
    assert alice.version == "unknown"
    assert set(forward_backend._probed.settled) == {"has_rrf_retriever", "has_linear_retriever"}
    # Asked again by her, the refused questions are refused again: still not remembered.
    assert forward_backend.with_headers(basic(secured.READER)).capabilities() == alice
    assert "version" not in forward_backend._probed.settled

    # The gateway's service account has `monitor` but not `manage`: the version settles, the analyzer not.
    service = forward_backend.with_headers(basic(secured.SERVICE)).capabilities()
    assert service.version == ES_VERSION
    assert set(forward_backend._probed.settled) == {"version", "has_rrf_retriever", "has_linear_retriever"}

    full = forward_backend.with_headers(basic(secured.ADMIN)).capabilities()
    assert full == truth
    # Everything settled: later callers get the cluster's answers, whoever they are.
    assert forward_backend.with_headers({}).capabilities() == truth
    assert forward_backend.with_headers(basic(secured.READER)).capabilities() == truth


def test_a_low_privilege_caller_searches_in_rrf_mode_through_the_gateway(forwarding_gateway, indices):  # noqa: F811
    """The probe asks cluster stats, which alice may not read: her refusal
    answers her request conservatively (client-side fusion) instead of
    failing it, and is not what the next caller sees."""
    allowed, _ = indices
    query = {"match": {"text": QUESTION}}
    rrf = {"chunkrag": {"mode": "rrf", "stages": False, "candidates": 3}}
    with pytest.raises(AuthenticationException):
        client_for(forwarding_gateway).search(index=allowed, query=query, ext=rrf)
    alice = client_for(forwarding_gateway, basic_auth=(secured.READER.name, secured.READER.password))
    first = alice.search(index=allowed, query=query, size=3, ext=rrf)
    assert "tokyo:0" in ids(first)
    service = client_for(forwarding_gateway, basic_auth=(secured.SERVICE.name, secured.SERVICE.password))
    assert ids(service.search(index=allowed, query=query, size=3, ext=rrf)) == ids(first)
    assert ids(alice.search(index=allowed, query=query, size=3, ext=rrf)) == ids(first)
