"""One caller identity per credential, however its Authorization header
spells it (`identity.credentials_identity`): the forward-mode key of the
per-caller cap on filtered searches, and of the rate limit where the cluster
cannot name the user. Literal headers; the spellings are the ones
Elasticsearch 9.5 takes as one credential (padding optional, scheme in any
case: checked against the secured test node)."""

from __future__ import annotations

import pytest

from chunkrag_gateway.identity import Authenticator, base64_credential, credentials_identity

# base64("VuaCfGcBCdbkQm-e5aOx:ui2lp2axTNmsyakw9tvNnw"), an API key's id:key, and without its padding.
API_KEY = b"VnVhQ2ZHY0JDZGJrUW0tZTVhT3g6dWkybHAyYXhUTm1zeWFrdzl0dk5udw=="
API_KEY_UNPADDED = b"VnVhQ2ZHY0JDZGJrUW0tZTVhT3g6dWkybHAyYXhUTm1zeWFrdzl0dk5udw"
# The same id with another key.
OTHER_API_KEY = b"VnVhQ2ZHY0JDZGJrUW0tZTVhT3g6b3RoZXIyYXhUTm1zeWFrdzl0dk5udw=="
# base64("alice:pw") and base64("alice:pw2").
ALICE = b"YWxpY2U6cHc="
ALICE_OTHER_PASSWORD = b"YWxpY2U6cHcy"
# base64("elastic/fleet-server/token1:secret"), as a service-account token (sent unpadded).
SERVICE_TOKEN = b"ZWxhc3RpYy9mbGVldC1zZXJ2ZXIvdG9rZW4xOnNlY3JldA"


def _identities(*headers: bytes) -> set[str]:
    return {credentials_identity(header) for header in headers}


@pytest.mark.parametrize(
    "spellings",
    [
        [
            b"ApiKey " + API_KEY,
            b"ApiKey " + API_KEY_UNPADDED,
            b"apikey " + API_KEY,
            b"APIKEY " + API_KEY_UNPADDED,
            b"  ApiKey\t" + API_KEY + b"  ",
        ],
        [b"Basic " + ALICE, b"Basic YWxpY2U6cHc", b"basic YWxpY2U6cHc", b"BASIC " + ALICE, b" Basic  " + ALICE + b" "],
        [b"Bearer " + SERVICE_TOKEN, b"Bearer " + SERVICE_TOKEN + b"==", b"bearer " + SERVICE_TOKEN],
        # Not base64 (a JWT): the scheme's case and the whitespace are all that may differ.
        [b"Bearer eyJhbGciOiJIUzI1NiJ9.e30.sig", b"bearer  eyJhbGciOiJIUzI1NiJ9.e30.sig "],
    ],
)
def test_every_spelling_of_one_credential_is_one_caller(spellings):
    assert len(_identities(*spellings)) == 1


def test_different_credentials_are_different_callers():
    headers = [
        b"ApiKey " + API_KEY,
        b"ApiKey " + OTHER_API_KEY,
        b"Basic " + ALICE,
        b"Basic " + ALICE_OTHER_PASSWORD,
        # The same bytes under another scheme are another credential.
        b"Bearer " + API_KEY,
        b"Bearer " + SERVICE_TOKEN,
        b"Bearer eyJhbGciOiJIUzI1NiJ9.e30.sig",
        b"Bearer eyJhbGciOiJIUzI1NiJ9.e30.other",
        # The id:key written out is not what the engines take; it is not the key's identity either.
        b"ApiKey VuaCfGcBCdbkQm-e5aOx:ui2lp2axTNmsyakw9tvNnw",
    ]
    assert len(_identities(*headers)) == len(headers)


def test_a_header_sent_as_written_never_takes_the_identity_of_decoded_bytes():
    # "alice:pw" written out after Basic is not base64: it must not read as base64("alice:pw").
    assert credentials_identity(b"Basic alice:pw") != credentials_identity(b"Basic " + ALICE)
    assert credentials_identity(b"Basic decoded:alice:pw") != credentials_identity(b"Basic " + ALICE)


def test_the_identity_is_a_hash_not_the_credentials():
    identity = credentials_identity(b"Basic " + ALICE)
    assert identity.startswith("credentials:") and len(identity) == len("credentials:") + 24
    assert "alice" not in identity and ALICE.decode() not in identity


@pytest.mark.parametrize(
    "token, decoded",
    [
        (b"YWxpY2U6cHc=", b"alice:pw"),
        (b"YWxpY2U6cHc", b"alice:pw"),
        (b"YWxpY2U6cHcy", b"alice:pw2"),
        (b"YQ==", b"a"),
        (b"YQ", b"a"),
        (b"YQ=", b"a"),  # one "=" of two, which the engines refuse: only the holder of "a" can send it
        (b"YWxpY2U6cHc-", None),  # the URL-safe alphabet: the engines' decoder refuses it
        (b"YWxpY2U6cHc_", None),
        (b"YWxpY", None),  # a length no base64 has
        (b"YQ===", None),
        (b"alice:pw", None),
        (b"eyJhbGciOiJIUzI1NiJ9.e30.sig", None),
        (b"", None),
    ],
)
def test_base64_is_read_with_or_without_its_padding(token, decoded):
    assert base64_credential(token) == decoded


def test_forward_mode_gives_a_padded_and_an_unpadded_api_key_one_caller():
    forward = Authenticator("forward", ())
    padded = forward.caller([(b"authorization", b"ApiKey " + API_KEY)])
    unpadded = forward.caller([(b"Authorization", b"apikey " + API_KEY_UNPADDED)])
    assert padded.identity == unpadded.identity
    # What reaches the cluster is the header as the caller sent it.
    assert (padded.authorization, unpadded.authorization) == (b"ApiKey " + API_KEY, b"apikey " + API_KEY_UNPADDED)
    other = forward.caller([(b"authorization", b"ApiKey " + OTHER_API_KEY)])
    assert other.identity != padded.identity
