"""What the gateway refuses at its start beyond the settings' own checks,
in a module light enough for every ``chunkrag`` command to run it (the
configuration check each command runs first, `chunkrag_cli.config_command`):
values that need the gateway's parsers (the API keys, the pairing of the auth
mode, the keys and the engine's credentials) and HTTPS's two files."""

from __future__ import annotations

from chunkrag_core.settings import Settings
from chunkrag_gateway.identity import Authenticator, check_engine_auth


def check_settings(settings: Settings) -> Authenticator:
    """The gateway's authenticator for ``settings``; raises ValueError
    naming the variable. ``create_app`` calls it, and so does the
    configuration check, so a configuration that passes is one the gateway
    starts with."""
    limits = settings.gateway
    if bool(limits.ssl_certfile) != bool(limits.ssl_keyfile):
        raise ValueError("HTTPS needs both CHUNKRAG_GATEWAY_SSL_CERTFILE and CHUNKRAG_GATEWAY_SSL_KEYFILE")
    authenticator = Authenticator.from_settings(limits)
    check_engine_auth(settings)
    return authenticator
