"""The gateway's default gate (CHUNKRAG_GATEWAY_GATE) stands for ``gate``
when a request names none, in chunk retrieval and post-search alike."""

from __future__ import annotations

import pytest

from chunkrag_core.settings import GATES, Settings, SettingsError
from chunkrag_filter.pipeline import FilterOptions
from search_extension.options import OptionError, parse_options
from search_extension.post_search import POST_SEARCH_GATE


def test_without_a_default_the_filters_own_defaults_stand():
    options = parse_options({}, surface="search")
    assert options.filter.gate == FilterOptions().gate
    assert options.post_search.gate == POST_SEARCH_GATE


@pytest.mark.parametrize("gate", GATES)
def test_the_default_gate_stands_for_a_request_naming_none(gate):
    options = parse_options({}, surface="search", default_gate=gate)
    assert options.filter.gate == gate and options.post_search.gate == gate


def test_a_gate_the_request_names_wins():
    options = parse_options({"gate": "retrieval"}, surface="search", default_gate="off")
    assert options.filter.gate == "retrieval" and options.post_search.gate is None


def test_an_unknown_default_is_refused_where_it_is_set_and_where_it_is_read():
    with pytest.raises(SettingsError, match="CHUNKRAG_GATEWAY_GATE must be one of off, retrieval, crossencoder"):
        Settings.from_env({"CHUNKRAG_GATEWAY_GATE": "sometimes"})
    assert Settings.from_env({"CHUNKRAG_GATEWAY_GATE": "off"}).gateway.gate == "off"
    assert Settings.from_env({}).gateway.gate == ""
    with pytest.raises(OptionError, match="default gate"):
        parse_options({}, default_gate="sometimes")
