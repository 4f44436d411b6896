"""SigV4 for OpenSearch on AWS: settings, the client's signer, the gateway's
pass-through signing. No AWS account is reachable here: each signature is
checked by recomputing it, the way the service does, from the request as it
arrived (a throwaway HTTP server on loopback, or the recorded pass-through)."""

import asyncio
import re
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from chunkrag_core.engines import make_backend
from chunkrag_core.settings import Settings, SettingsError
from chunkrag_gateway import create_app
from chunkrag_gateway.identity import ApiKey, Caller, ConfigError, key_hash
from chunkrag_gateway.passthrough import Passthrough
from tests.unit.test_gateway_app import (
    FakeElasticsearch,
    FakeEmbedder,
    FakeModel,
    RecordingTransport,
    es_reply,
    judge_factory,
)

botocore = pytest.importorskip("botocore", reason="the [aws] extra")

ACCESS, SECRET, TOKEN = "AKIDEXAMPLE", "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY", "session-token-example"
SIGV4_ENV = {"OPENSEARCH_URL": "http://127.0.0.1:9201", "OPENSEARCH_AUTH": "sigv4", "AWS_REGION": "eu-west-1"}


@pytest.fixture
def aws_credentials(monkeypatch, tmp_path):
    """Credentials from the environment, the first link of botocore's chain;
    no profile or shared file of this machine is read."""
    for name in ("AWS_PROFILE", "AWS_DEFAULT_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", ACCESS)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", SECRET)
    monkeypatch.setenv("AWS_SESSION_TOKEN", TOKEN)


# --- settings --------------------------------------------------------------------------


def test_sigv4_settings():
    settings = Settings.from_env(SIGV4_ENV)
    assert (
        settings.search_backend,
        settings.opensearch_auth,
        settings.opensearch_aws_region,
        settings.opensearch_aws_service,
    ) == ("opensearch", "sigv4", "eu-west-1", "es")
    assert Settings.from_env({**SIGV4_ENV, "OPENSEARCH_AWS_SERVICE": "aoss"}).opensearch_aws_service == "aoss"
    assert Settings.from_env({}).opensearch_auth == "basic"


@pytest.mark.parametrize(
    "env, message",
    [
        ({"OPENSEARCH_AUTH": "sigv4"}, "needs the domain's region"),
        ({**SIGV4_ENV, "OPENSEARCH_AWS_SERVICE": "s3"}, "choose es .* or aoss"),
        ({**SIGV4_ENV, "OPENSEARCH_URL": "https://admin:pw@search.example:443"}, "remove the user and password"),
        ({"OPENSEARCH_AUTH": "kerberos"}, "choose one of basic, sigv4"),
    ],
)
def test_bad_sigv4_settings_are_refused_with_the_reason(env, message):
    with pytest.raises(SettingsError, match=message):
        Settings.from_env(env)


# --- the client ------------------------------------------------------------------------


def test_the_client_is_built_with_opensearch_pys_signer(aws_credentials):
    from opensearchpy import Urllib3AWSV4SignerAuth

    backend = make_backend(Settings.from_env({**SIGV4_ENV, "OPENSEARCH_AWS_SERVICE": "aoss"}))
    auth = backend.client.transport.get_connection().http_auth
    assert isinstance(auth, Urllib3AWSV4SignerAuth)
    assert (auth.signer.region, auth.signer.service) == ("eu-west-1", "aoss")
    # Basic auth stays the default: no signer without OPENSEARCH_AUTH=sigv4.
    plain = make_backend(Settings.from_env({"OPENSEARCH_URL": "http://u:p@127.0.0.1:9201"}))
    assert plain.client.transport.get_connection().http_auth == ("u", "p")


def test_a_missing_botocore_names_the_extra(aws_credentials, monkeypatch):
    monkeypatch.setitem(sys.modules, "botocore.session", None)  # import fails as if not installed
    with pytest.raises(SettingsError, match=re.escape("pip install 'chunkrag-es[aws]'")):
        make_backend(Settings.from_env(SIGV4_ENV))


def test_no_credentials_anywhere_is_a_clear_error(monkeypatch, tmp_path):
    for name in (
        "AWS_ACCESS_KEY_ID",
        "AWS_SECRET_ACCESS_KEY",
        "AWS_SESSION_TOKEN",
        "AWS_PROFILE",
        "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
        "AWS_CONTAINER_CREDENTIALS_FULL_URI",
        "AWS_WEB_IDENTITY_TOKEN_FILE",
    ):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")  # no instance role to ask here
    with pytest.raises(SettingsError, match="found no AWS credentials"):
        make_backend(Settings.from_env(SIGV4_ENV))


def recomputed_signature(method, host, path_and_query, headers, body, region, service):
    """The signature a SigV4 verifier computes from the request as received:
    the headers the Authorization names, the time X-Amz-Date gives."""
    from botocore.auth import SigV4Auth
    from botocore.awsrequest import AWSRequest
    from botocore.credentials import Credentials

    authorization = headers["authorization"]
    signed_names = re.search(r"SignedHeaders=([^,]+)", authorization).group(1).split(";")
    request = AWSRequest(
        method=method,
        url=f"http://{host}{path_and_query}",
        data=body,
        headers={name: headers[name] for name in signed_names},
    )
    request.context["timestamp"] = headers["x-amz-date"]
    auth = SigV4Auth(Credentials(ACCESS, SECRET, TOKEN), service, region)
    return auth.signature(auth.string_to_sign(request, auth.canonical_request(request)), request)


def assert_signed(method, host, path_and_query, headers, body, region="eu-west-1", service="es"):
    headers = {name.lower(): value for name, value in headers.items()}
    authorization = headers["authorization"]
    assert re.fullmatch(
        rf"AWS4-HMAC-SHA256 Credential={ACCESS}/\d{{8}}/{region}/{service}/aws4_request, "
        rf"SignedHeaders=\S+, Signature=[0-9a-f]{{64}}",
        authorization,
    )
    assert re.fullmatch(r"\d{8}T\d{6}Z", headers["x-amz-date"])
    assert headers["x-amz-security-token"] == TOKEN
    assert {"host", "x-amz-date", "x-amz-content-sha256", "x-amz-security-token"} <= set(
        re.search(r"SignedHeaders=([^,]+)", authorization).group(1).split(";")
    )
    assert authorization.endswith(
        "Signature=" + recomputed_signature(method, host, path_and_query, headers, body, region, service)
    )


class _Recorder(BaseHTTPRequestHandler):
    seen: list = []

    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("content-length") or 0))
        self.seen.append((self.command, self.path, dict(self.headers.items()), body))
        reply = b'{"took":1,"timed_out":false,"hits":{"total":{"value":0,"relation":"eq"},"hits":[]}}'
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(reply)))
        self.end_headers()
        self.wfile.write(reply)

    def log_message(self, *args):
        pass


def test_a_request_through_the_client_arrives_signed(aws_credentials):
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Recorder)
    _Recorder.seen = []
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        host = f"127.0.0.1:{server.server_address[1]}"
        backend = make_backend(Settings.from_env({**SIGV4_ENV, "OPENSEARCH_URL": f"http://{host}"}))
        backend.client.search(index="docs", body={"query": {"match": {"text": "ünïcode body"}}}, params={"size": 3})
    finally:
        server.shutdown()
        server.server_close()
    method, path, headers, body = _Recorder.seen[0]
    assert path == "/docs/_search?size=3"
    assert_signed(method, host, path, headers, body)


# --- the gateway -----------------------------------------------------------------------


def test_the_pass_through_signs_each_request_in_service_mode(aws_credentials):
    settings = Settings.from_env(
        {**SIGV4_ENV, "CHUNKRAG_GATEWAY_AUTH": "service", "CHUNKRAG_GATEWAY_API_KEYS": f"ops:{key_hash('k')}:*"}
    )
    transport = RecordingTransport(es_reply)
    passthrough = Passthrough(settings, transport)
    body = b'{"query":{"match_all":{}}}'
    caller_headers = [(b"content-type", b"application/json"), (b"x-amz-date", b"19700101T000000Z")]
    # Service mode forwards only for a gateway key.
    ops = Caller(key=ApiKey("ops", b"x" * 32, ("*",)), identity="key:ops")
    asyncio.run(passthrough.forward("POST", "/docs/_search?size=2", caller_headers, body, ops))
    method, target, headers, sent = transport.requests[0]
    assert headers[b"x-amz-date"] != b"19700101T000000Z"  # the caller's own x-amz-* never reaches the cluster
    decoded = {name.decode(): value.decode() for name, value in headers.items()}
    # OriginPool sends Host as host:port; the signature covers exactly that.
    assert_signed(method, "127.0.0.1:9201", target, {**decoded, "host": "127.0.0.1:9201"}, sent)


def test_forward_mode_refuses_sigv4_at_start(aws_credentials):
    settings = Settings.from_env(SIGV4_ENV)
    with pytest.raises(ConfigError, match="CHUNKRAG_GATEWAY_AUTH=service"):
        create_app(
            settings,
            es=FakeElasticsearch(),
            embedder=FakeEmbedder(),
            model=FakeModel(),
            judge_many_factory=judge_factory,
            http_transport=RecordingTransport(es_reply),
        )
    settings = Settings.from_env(
        {**SIGV4_ENV, "CHUNKRAG_GATEWAY_AUTH": "service", "CHUNKRAG_GATEWAY_API_KEYS": f"ops:{key_hash('k')}:*"}
    )
    create_app(
        settings,
        es=FakeElasticsearch(),
        embedder=FakeEmbedder(),
        model=FakeModel(),
        judge_many_factory=judge_factory,
        http_transport=RecordingTransport(es_reply),
    )
