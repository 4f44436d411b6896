"""A printed URL never shows any piece of its password, whatever characters
the password holds and whether or not the URL parses: the user part ends at
the entry's last ``@`` (`chunkrag_core.redaction.redact_url`), and the
settings' own error for a node URL they refuse quotes the whole value
through it."""

from __future__ import annotations

import pytest

from chunkrag_core.redaction import redact_url, redacted
from chunkrag_core.settings import Settings, SettingsError

# A password holding every character a URL gives a meaning to, between
# pieces that are easy to look for: no piece may be printed.
PIECES = ("Ab", "Cd", "Ef", "Gh", "Ij", "Kl", "Mn", "Op")
EVERY_MARK = "Ab@Cd:Ef#Gh/Ij?Kl%Mn,Op"


def _shows_a_piece(text: str) -> bool:
    return any(piece in text for piece in PIECES)


@pytest.mark.parametrize(
    "url, shown",
    [
        ("https://elastic:Ab@es.example:9243/", "https://elastic:***@es.example:9243/"),
        ("http://elastic:Ab@Cd@host:9200", "http://elastic:***@host:9200"),
        ("http://elastic:Ab@Cd:Ef@host:9200", "http://elastic:***@host:9200"),
        ("http://elastic:Ab:Cd@host:9200", "http://elastic:***@host:9200"),
        ("http://elastic:Ab%Cd@host:9200", "http://elastic:***@host:9200"),
        ("http://elastic:Ab%40Cd@host:9200", "http://elastic:***@host:9200"),
        ("http://elastic:Ab,Cd@host:9200", "http://elastic:***@host:9200"),
        # With / ? or # in the user part it cannot be told from a path or a
        # query holding an @: the whole of it is masked, the user too.
        ("http://elastic:Ab@Cd:Ef#Gh@host:9200", "http://***@host:9200"),
        ("http://elastic:Ab/Cd@host:9200/", "http://***@host:9200/"),
        ("http://elastic:Ab?Cd@host:9200", "http://***@host:9200"),
        (f"http://elastic:{EVERY_MARK}@host:9200", "http://***@host:9200"),
        (
            f"https://elastic:{EVERY_MARK}@host:9200/p?api_key=Kl&size=3#Mn",
            "https://***@host:9200/p?api_key=***&size=3#***",
        ),
    ],
)
def test_a_password_is_masked_whole_whatever_it_holds(url, shown):
    assert redact_url(url) == shown
    assert redacted("ES_URL", url) == shown


def test_a_url_without_a_scheme_loses_its_password_too():
    assert redact_url("elastic:Ab@Cd@host:9200") == "elastic:***@host:9200"
    assert redact_url(f"elastic:{EVERY_MARK}@host:9200") == "***@host:9200"
    assert redacted("REDIS_URL", "default:Ab@Cd:Ef@r:6379/0") == "default:***@r:6379/0"


def test_every_url_of_a_list_loses_its_password():
    assert redact_url("http://u:Ab@Cd@a:9200,http://b:9200") == "http://u:***@a:9200,http://b:9200"
    # A comma starts another URL only before a scheme: here it is the password's.
    assert redact_url("http://u:Ab,Cd@a:9200, https://u:Ef#Gh@b:9200") == "http://u:***@a:9200, https://***@b:9200"
    assert redact_url(f"https://u:{EVERY_MARK}@a:9200,https://u:{EVERY_MARK}@b:9200") == (
        "https://***@a:9200,https://***@b:9200"
    )
    assert (
        redact_url("https://a/v1?api_key=Ab,https://b/v1?token=Cd") == "https://a/v1?api_key=***,https://b/v1?token=***"
    )


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1:9200",
        "https://a:9200,https://b:9200/es",
        "redis://r:6379/0",
        "http://elastic@h:9200",  # a user alone
        "host:9200",
        "user@host",  # no scheme and no colon: an address, not a user and password
        "https://llm.example/v1?model=m&size=3",
    ],
)
def test_a_url_without_a_password_is_printed_as_written(url):
    assert redact_url(url) == url


def test_an_at_in_a_path_or_query_hides_more_than_needed_never_less():
    assert redact_url("http://h:9200/_search?q=a@b") == "http://***@b"


@pytest.mark.parametrize(
    "raw",
    [
        "http://elastic:Ab@Cd:Ef#Gh@host:9200",  # port "Ef": refused
        "http://elastic:Ab@Cd:9#Ef@host:9200",  # host Cd, port 9 as parsed: the @ after it is refused
        "http://elastic:Ab/Cd@host:9200",
        "http://elastic:Ab?Cd@host:9200",
        "http://elastic:Ab,Cd@host:9200",  # the comma splits the value into two entries
        "http://elastic:12,Cd@host:9200",  # entry 1 parses (host elastic, port 12), entry 2 has no scheme
        f"http://elastic:{EVERY_MARK}@host:9200",
        f"http://elastic:{EVERY_MARK}@a:9200,http://b:9200",
    ],
)
def test_the_settings_error_for_a_node_url_shows_no_piece_of_the_password(raw):
    with pytest.raises(SettingsError) as refused:
        Settings.from_env({"ES_URL": raw})
    message = str(refused.value)
    assert not _shows_a_piece(message), message
    assert "ES_URL=" in message and "percent-encoded" in message
    with pytest.raises(SettingsError) as refused:
        Settings.from_env({"OPENSEARCH_URL": raw})
    assert not _shows_a_piece(str(refused.value)) and "OPENSEARCH_URL=" in str(refused.value)


def test_the_url_of_the_report_is_refused_without_its_password():
    with pytest.raises(SettingsError) as refused:
        Settings.from_env({"ES_URL": "http://elastic:p@ss:w#rd@host:9200"})
    message = str(refused.value)
    assert "ES_URL='http://***@host:9200'" in message
    assert not any(piece in message for piece in ("p@", "ss:w", "w#", "#rd", "rd@")), message


def test_a_password_written_percent_encoded_is_taken_and_printed_masked():
    settings = Settings.from_env({"ES_URL": "http://elastic:Ab%40Cd%3AEf%23Gh%2FIj@host:9200"})
    assert settings.es_nodes == ("http://elastic:Ab%40Cd%3AEf%23Gh%2FIj@host:9200",)
    assert settings.es_url_for_display == "http://elastic:***@host:9200"


@pytest.mark.parametrize(
    "argv, exit_code", [(["config", "show"], 0), (["config", "check"], 1), (["cluster"], 2), (["serve"], 2)]
)
def test_no_command_prints_a_piece_of_the_password(argv, exit_code, tmp_path, monkeypatch, capsys):
    """`config show` lists the value, the others stop on the settings' error
    before reaching the cluster: each prints the URL through the one redaction."""
    import os

    from chunkrag_cli.main import main
    from chunkrag_core import config_names

    monkeypatch.chdir(tmp_path)
    kept = {name: value for name, value in os.environ.items() if not config_names.is_known(name)}
    monkeypatch.setattr(os, "environ", {**kept, "ES_URL": f"http://elastic:{EVERY_MARK}@host:9200"})
    code = main(argv)
    out = capsys.readouterr()
    assert "http://***@host:9200" in out.out + out.err
    assert not _shows_a_piece(out.out + out.err), out
    assert code == exit_code
