"""Post-search on the secured Elasticsearch node (9250): a role whose
document-level security hides some documents and whose field-level
security hides a text field. Their passages never appear, in forward mode
(the caller's own credentials) and in service mode (the gateway key's
derived API key, owned by a service account holding that role), even
after a caller who may read everything has filled the query-time cache
with them."""

from __future__ import annotations

import uuid

import httpx
import orjson
import pytest
from elasticsearch import Elasticsearch

from chunkrag_gateway import create_app
from chunkrag_gateway.identity import key_hash
from chunkrag_gateway.server import serve_in_thread as serving

# The secured node and its admin client, shared with the other secured tests.
from tests.integration.test_gateway_secured import admin, gateway_settings, secured_node  # noqa: F401
from tests.support import secured_elasticsearch as secured

pytestmark = pytest.mark.integration

SUFFIX = uuid.uuid4().hex[:8]
HIDDEN_DOC = "HIDDENDOC" + SUFFIX  # in a document the role's query excludes
HIDDEN_FIELD = "HIDDENFIELD" + SUFFIX  # in the field the role's field security excludes
PATTERN = f"{secured.ALLOWED_PREFIX}pskb-*"
ROLE = f"post_search_dls_{SUFFIX}"
READER = (f"ps-reader-{SUFFIX}", "reader-pw-" + SUFFIX)
SERVICE = (f"ps-service-{SUFFIX}", "service-pw-" + SUFFIX)
KEY = "post-search-key-" + uuid.uuid4().hex
QUESTION = "how do I rotate an API key"
MAPPING = {
    "properties": {
        "title": {"type": "text"},
        "body": {"type": "text"},
        "notes": {"type": "text"},
        "visibility": {"type": "keyword"},
    }
}
DOCS = {
    "public": {
        "title": "Rotating API keys",
        "body": "To rotate an API key, open the console and press Rotate. The old key works for a day.",
        "notes": f"Internal: the rotation service account password is {HIDDEN_FIELD}. Rotate API keys quarterly.",
        "visibility": "public",
    },
    "internal": {
        "title": "Rotating API keys (staff)",
        "body": f"Staff rotate an API key with the admin tool {HIDDEN_DOC}. Rotation of API keys is logged.",
        "notes": "Only staff may read this.",
        "visibility": "internal",
    },
}


@pytest.fixture(scope="module")
def kb(admin):  # noqa: F811
    """A trial licence (document- and field-level security), the index, a
    role hiding the internal document and the notes field, a reader and a
    service account holding it."""
    if admin.license.get()["license"]["type"] == "basic":
        started = admin.license.post_start_trial(acknowledge=True)
        assert started.get("trial_was_started"), started
    index = f"{secured.ALLOWED_PREFIX}pskb-{SUFFIX}"
    admin.indices.create(index=index, mappings=MAPPING)
    for doc_id, doc in DOCS.items():
        admin.index(index=index, id=doc_id, document=doc)
    admin.indices.refresh(index=index)
    admin.security.put_role(
        name=ROLE,
        cluster=["monitor", "manage_own_api_key"],
        indices=[
            {
                "names": [PATTERN],
                "privileges": ["read"],
                "query": {"term": {"visibility": "public"}},
                "field_security": {"grant": ["*"], "except": ["notes"]},
            }
        ],
    )
    for name, password in (READER, SERVICE):
        admin.security.put_user(username=name, password=password, roles=[ROLE])
    yield index
    for name, _ in (READER, SERVICE):
        admin.security.delete_user(username=name)
    admin.security.delete_role(name=ROLE)
    admin.indices.delete(index=index, ignore_unavailable=True)


@pytest.fixture(scope="module")
def forwarding(settings, embedder, kb):
    with serving(create_app(gateway_settings(settings, secured.url_for()), embedder=embedder)) as url:
        yield url


@pytest.fixture(scope="module")
def service(settings, embedder, kb):
    name, password = SERVICE
    keys = f"kb:{key_hash(KEY)}:{PATTERN}"
    chosen = gateway_settings(
        settings, f"http://{name}:{password}@127.0.0.1:{secured.PORT}", auth="service", api_keys=keys
    )
    with serving(create_app(chosen, embedder=embedder)) as url:
        yield url


def body(**chunkrag) -> dict:
    return {
        "query": {"multi_match": {"query": QUESTION, "fields": ["title", "body", "notes"]}},
        "ext": {"chunkrag": {"answer": False, "include_dropped": True, "fixed_threshold": 0.0, **chunkrag}},
    }


def test_an_admin_sees_everything_and_fills_the_cache(forwarding, kb):
    admin_client = Elasticsearch(
        forwarding, basic_auth=(secured.ADMIN.name, secured.ADMIN.password), request_timeout=60
    )
    answer = admin_client.search(index=kb, body=body(fields=["body", "notes"]))
    shown = orjson.dumps(answer.body).decode()
    # Everything readable is split: the hidden words are there for the admin.
    assert HIDDEN_DOC in shown and HIDDEN_FIELD in shown
    admin_client.close()


@pytest.mark.parametrize("mode", ["forward", "service"])
def test_hidden_documents_and_fields_never_give_a_passage(forwarding, service, kb, mode):
    if mode == "forward":
        client = Elasticsearch(forwarding, basic_auth=READER, request_timeout=60)
    else:
        client = Elasticsearch(service, api_key=KEY, request_timeout=60)
    try:
        for request in (body(), body(mode="post_search"), {**body(), "_source": True, "fields": ["notes"]}):
            answer = client.search(index=kb, body=request)
            shown = orjson.dumps(answer.body).decode()
            assert [h["_id"] for h in answer["hits"]["hits"]] == ["public"]
            passages = answer["hits"]["hits"][0]["_chunkrag"]["passages"]
            assert passages and {p["field"] for p in passages} == {"body"}
            assert HIDDEN_DOC not in shown and HIDDEN_FIELD not in shown
        # The hidden field does not exist for this caller: naming it is a 400 naming it.
        refused = httpx.post(
            f"{forwarding if mode == 'forward' else service}/{kb}/_search",
            json=body(fields=["body", "notes"]),
            auth=READER if mode == "forward" else None,
            headers={} if mode == "forward" else {"authorization": f"ApiKey {KEY}"},
            timeout=60,
        )
        assert refused.status_code == 400 and "[notes]" in refused.text
        assert HIDDEN_FIELD not in refused.text and HIDDEN_DOC not in refused.text
    finally:
        client.close()
