"""Forward mode's rate-limit identity is the cluster's user for a credential
(cluster_users.py), asked once and kept; literal answers, no cluster."""

import asyncio

from chunkrag_core.engines.profile import ELASTICSEARCH, OPENSEARCH
from chunkrag_gateway import errors
from chunkrag_gateway.cluster_users import ClusterUsers, user_of
from chunkrag_gateway.identity import Caller, basic, credentials_identity


def test_the_user_an_answer_names():
    assert user_of(200, b'{"username":"alice","authentication_realm":{"name":"file1"}}') == "alice"
    assert user_of(200, b'{"user_name":"bob","backend_roles":[]}') == "bob"  # OpenSearch
    assert user_of(401, b'{"username":"alice"}') is None
    assert user_of(200, b"not json") is None and user_of(200, b'{"username":""}') is None


def caller(authorization: bytes) -> Caller:
    return Caller(authorization, identity=credentials_identity(authorization))


def test_credentials_of_one_user_share_an_identity_asked_once_per_credential():
    asked = []
    answers = {basic("alice", "pw"): (200, b'{"username":"alice"}'), b"ApiKey a1": (200, b'{"username":"alice"}')}

    async def ask(authorization, path):
        asked.append((authorization, path))
        if authorization == b"ApiKey down":
            raise errors.unavailable("Elasticsearch is not reachable")
        return answers.get(authorization, (401, b"{}"))

    now = [0.0]
    users = ClusterUsers(ask, ELASTICSEARCH.whoami_path, ttl_s=60, clock=lambda: now[0])

    async def identities(*headers):
        return [(await users.identify(caller(header))).identity for header in headers]

    alice, key, wrong = basic("alice", "pw"), b"ApiKey a1", basic("alice", "nope")
    got = asyncio.run(identities(alice, key, alice, wrong))
    assert got[:3] == ["user:alice"] * 3 and got[3] == credentials_identity(wrong)
    assert [path for _, path in asked] == ["/_security/_authenticate"] * 3  # alice's Basic asked once
    now[0] = 61.0
    asyncio.run(identities(alice))
    assert len(asked) == 4  # asked again once the answer is old
    # The cluster cannot say: the credential's own identity, asked again next time.
    down = b"ApiKey down"
    assert asyncio.run(identities(down, down)) == [credentials_identity(down)] * 2 and len(asked) == 6
    # Service mode's keys and callers without credentials are never asked about.
    assert asyncio.run(users.identify(Caller(identity="address:10.0.0.1"))).identity == "address:10.0.0.1"
    assert len(asked) == 6
    assert ELASTICSEARCH.whoami_path == "/_security/_authenticate"
    assert OPENSEARCH.whoami_path == "/_plugins/_security/authinfo"
