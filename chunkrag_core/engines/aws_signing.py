"""AWS Signature Version 4 for a managed OpenSearch domain (`es`) or an
OpenSearch Serverless collection (`aoss`).

Signing is opensearch-py's own (``Urllib3AWSV4SignerAuth`` for the client,
its ``AWSV4Signer`` for the gateway's pass-through); the credentials come from
botocore's default chain: AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY /
AWS_SESSION_TOKEN first, then AWS_PROFILE and the shared files, SSO, the
container and instance roles. botocore is the optional extra ``[aws]``.
"""

from __future__ import annotations

from typing import Protocol

from chunkrag_core.settings_error import SettingsError

MISSING_BOTOCORE = "OPENSEARCH_AUTH=sigv4 needs botocore, which is not installed: pip install 'chunkrag-es[aws]'"


class SigningSettings(Protocol):
    """What signing reads of the project's settings (``chunkrag_core.settings.Settings``,
    which lies above this module and is not imported here)."""

    opensearch_auth: str
    opensearch_aws_region: str
    opensearch_aws_service: str


def opensearch_sigv4(settings: SigningSettings) -> tuple[str, str] | None:
    """(region, service) when OpenSearch requests are to be SigV4-signed."""
    if settings.opensearch_auth != "sigv4":
        return None
    return settings.opensearch_aws_region, settings.opensearch_aws_service


def credentials():
    """Refreshable credentials from botocore's default chain (nothing is
    fetched until a request is signed, except the chain's own look-up)."""
    try:
        import botocore.session
    except ImportError as exc:
        raise SettingsError(MISSING_BOTOCORE) from exc
    found = botocore.session.get_session().get_credentials()
    if found is None:
        raise SettingsError(
            "OPENSEARCH_AUTH=sigv4 found no AWS credentials: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY "
            "(and AWS_SESSION_TOKEN for temporary ones), or AWS_PROFILE, or run with an instance or task role"
        )
    return found


def client_auth(region: str, service: str):
    """The ``http_auth`` of an opensearch-py client on its default urllib3
    connection: every request is signed, body included."""
    from opensearchpy import Urllib3AWSV4SignerAuth

    return Urllib3AWSV4SignerAuth(credentials(), region, service)


def request_signer(region: str, service: str):
    """A signer of single requests (``.sign(method, url, body, headers)`` ->
    the headers to send), for requests that do not go through the client."""
    from opensearchpy.helpers.signer import AWSV4Signer

    return AWSV4Signer(credentials(), region, service)
