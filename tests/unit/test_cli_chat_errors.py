"""A chat model that fails ends a command with one line naming it, and a
timeout names the setting that waits longer."""

import httpx
import openai
import pytest

from chunkrag_cli import main as cli
from chunkrag_core.providers.chat import chat_error


def timed_out(url: str = "http://127.0.0.1:8088/v1"):
    return chat_error(openai.APITimeoutError(request=httpx.Request("POST", url)), url, timeout_s=120.0)


def test_a_timeout_says_how_long_it_waited():
    error = timed_out()
    assert error.timed_out and error.retryable
    assert str(error).startswith("http://127.0.0.1:8088/v1 did not answer within 120 s")


def test_the_command_line_names_the_timeout_setting(monkeypatch, capsys):
    def slow_model(args):
        raise timed_out()

    monkeypatch.setattr(cli, "cmd_search", slow_model)
    assert cli.main(["search", "what rotates the key", "--index", "kb"]) == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith("chunkrag: the chat model failed: http://127.0.0.1:8088/v1 did not answer within 120 s")
    assert err.endswith("(CHUNKRAG_CHAT_TIMEOUT_S sets how long a call waits)")
    assert "\n" not in err


def test_a_refusal_is_not_called_a_timeout(monkeypatch, capsys):
    def refusing(args):
        raise chat_error(
            openai.BadRequestError(
                "bad", response=httpx.Response(400, request=httpx.Request("POST", "http://m/v1")), body=None
            ),
            "http://m/v1",
        )

    monkeypatch.setattr(cli, "cmd_search", refusing)
    assert cli.main(["search", "q", "--index", "kb"]) == 1
    err = capsys.readouterr().err
    assert "answered 400" in err and "CHUNKRAG_CHAT_TIMEOUT_S" not in err


@pytest.fixture(autouse=True)
def no_config_file(monkeypatch):
    monkeypatch.setenv("CHUNKRAG_CONFIG", "none")
    monkeypatch.delenv("CHUNKRAG_DEBUG", raising=False)
