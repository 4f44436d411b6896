"""GET / and HEAD / through the gateway where the cluster answers 405 (the
Elasticsearch test distribution): the root document rebuilt from _nodes and
the cluster state, asked with the caller's credentials; a cluster that
answers GET / itself is passed through untouched."""

import orjson

from chunkrag_core.engines.root_info import NODE_PATH, UUID_PATH, root_document
from chunkrag_gateway.origin import HttpResponse
from tests.unit.test_gateway_app import RecordingTransport, make_client

NODES = {
    "cluster_name": "chunkrag-local",
    "nodes": {
        "n1": {
            "name": "node-1",
            "version": "9.5.0",
            "build_flavor": "default",
            "build_type": "zip",
            "build_hash": "abc123",
        }
    },
}
STATE = {"metadata": {"cluster_uuid": "uuid-1"}}
PRODUCT = ((b"x-elastic-product", b"Elasticsearch"), (b"content-type", b"application/json"))


def test_the_root_document_is_rebuilt_from_nodes_and_state():
    assert root_document("elasticsearch", NODES, STATE) == {
        "name": "node-1",
        "cluster_name": "chunkrag-local",
        "cluster_uuid": "uuid-1",
        "version": {"number": "9.5.0", "build_flavor": "default", "build_type": "zip", "build_hash": "abc123"},
        "tagline": "You Know, for Search",
    }


def test_opensearch_says_its_distribution_and_a_missing_uuid_is_left_out():
    document = root_document("opensearch", {"cluster_name": "c", "nodes": {"n": {"name": "x", "version": "3.5.0"}}}, {})
    assert document == {
        "name": "x",
        "cluster_name": "c",
        "version": {"number": "3.5.0", "distribution": "opensearch"},
        "tagline": "The OpenSearch Project: https://opensearch.org/",
    }


def test_nodes_without_a_node_give_no_document():
    assert root_document("elasticsearch", {"nodes": {}}, STATE) is None
    assert root_document("elasticsearch", {"nodes": {"n": {"name": "no version"}}}, STATE) is None


def cluster_without_root(method, target):
    if target == "/":
        return HttpResponse(405, PRODUCT, b'{"error":"Incorrect HTTP method for uri [/] and method [GET]"}')
    if target == NODE_PATH:
        return HttpResponse(200, PRODUCT, orjson.dumps(NODES))
    if target == UUID_PATH:
        return HttpResponse(200, PRODUCT, orjson.dumps(STATE))
    return HttpResponse(404, PRODUCT, b"{}")


def test_get_and_head_root_answer_as_a_cluster_would_with_the_callers_credentials():
    transport = RecordingTransport(cluster_without_root)
    client, _ = make_client(transport)
    got = client.get("/", headers={"authorization": "Basic dTpw"})
    assert got.status_code == 200
    assert got.headers["x-elastic-product"] == "Elasticsearch"
    assert got.json()["version"]["number"] == "9.5.0" and got.json()["cluster_uuid"] == "uuid-1"
    head = client.head("/")
    assert head.status_code == 200 and head.content == b""
    assert int(head.headers["content-length"]) == len(got.content)
    sent = [(m, t, h.get(b"authorization")) for m, t, h, _ in transport.requests[:3]]
    assert sent == [("GET", "/", b"Basic dTpw"), ("GET", NODE_PATH, b"Basic dTpw"), ("GET", UUID_PATH, b"Basic dTpw")]


def test_a_refusal_of_nodes_stands_and_a_cluster_root_passes_untouched():
    def refusing(method, target):
        if target == NODE_PATH:
            return HttpResponse(403, PRODUCT, b'{"error":"action [cluster:monitor/nodes/info] is unauthorized"}')
        return cluster_without_root(method, target)

    client, _ = make_client(RecordingTransport(refusing))
    assert client.get("/").status_code == 403

    own = RecordingTransport(lambda method, target: HttpResponse(200, PRODUCT, b'{"name":"its own"}'))
    client, _ = make_client(own)
    assert client.get("/").json() == {"name": "its own"}
    assert [t for _, t, _, _ in own.requests] == ["/"]


def test_only_the_root_is_rebuilt():
    transport = RecordingTransport(lambda method, target: HttpResponse(405, PRODUCT, b"{}"))
    client, _ = make_client(transport, passthrough="read,write")
    assert client.get("/idx").status_code == 405
    assert [t for _, t, _, _ in transport.requests] == ["/idx"]


def test_service_mode_answers_get_root_itself_with_the_version_and_tagline_only():
    """A derived key holds no cluster privilege: the cluster refuses it GET /
    (403), so a framework's store could not connect. The gateway answers,
    with the version read once with its own credentials."""
    from chunkrag_core.engines.root_info import VERSION_PATH
    from tests.unit.test_gateway_security import KEY_A, KEYS, KeyMakingTransport, app_client

    def cluster(method, target):
        if target == VERSION_PATH:
            return HttpResponse(200, PRODUCT, orjson.dumps(NODES))
        return HttpResponse(403, PRODUCT, b'{"error":{"type":"security_exception","reason":"unauthorized"}}')

    transport = KeyMakingTransport(cluster)
    client = app_client(transport, auth="service", api_keys=KEYS)
    team = {"authorization": f"ApiKey {KEY_A}"}
    got = client.get("/", headers=team)
    assert got.status_code == 200 and got.headers["x-elastic-product"] == "Elasticsearch"
    assert got.json() == {
        "name": "chunkrag-gateway",
        "cluster_name": "chunkrag-gateway",
        "version": {"number": "9.5.0"},
        "tagline": "You Know, for Search",
    }
    head = client.head("/", headers=team)
    assert head.status_code == 200 and head.content == b""
    assert int(head.headers["content-length"]) == len(got.content)
    asked = [(target, headers.get(b"authorization")) for _, target, headers, _ in transport.requests]
    assert asked == [(VERSION_PATH, transport.requests[0][2][b"authorization"])]  # once, then kept
    assert b"derived" not in asked[0][1]  # the gateway's own credentials, not the key's derived one
    assert client.get("/").status_code == 401  # a key is still needed


def test_service_mode_root_is_a_503_when_the_version_cannot_be_read():
    from tests.unit.test_gateway_security import KEY_A, KEYS, KeyMakingTransport, app_client

    refusing = KeyMakingTransport(lambda method, target: HttpResponse(403, PRODUCT, b'{"error":"no monitor"}'))
    client = app_client(refusing, auth="service", api_keys=KEYS)
    answer = client.get("/", headers={"authorization": f"ApiKey {KEY_A}"})
    assert answer.status_code == 503 and "monitor" in answer.json()["error"]["reason"]
    assert "gateway" in answer.json()["error"]["reason"] and "no monitor" not in answer.text
