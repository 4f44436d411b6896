"""What one filtered search may cost, bounded before it starts: its judging
budget (at most the gateway's max_budget_s, by default the filter's own
budget) and its work estimate (candidates x passages x query tokens, at
most max_work), each refused with a 400 that names the limit."""

from __future__ import annotations

import dataclasses

import pytest

from chunkrag_core.settings import GatewaySettings, Settings, WorkerSettings
from chunkrag_gateway.dialect import OptionError, parse_ask, parse_post_search, parse_search, search_options
from search_extension.cost import check_work, estimate, query_tokens
from search_extension.options import parse_options
from tests.unit.test_gateway_app import make_client


def _body(text: str, **chunkrag) -> dict:
    return {"query": {"match": {"text": text}}, "ext": {"chunkrag": chunkrag}}


def test_query_tokens_are_words_and_punctuation_marks():
    assert query_tokens("How do I rotate the API keys?") == 8
    assert query_tokens("") == 1  # never zero: a query costs something
    assert estimate("a b c", 10, 32).total == 960


def test_a_search_over_the_work_limit_is_refused_naming_the_estimate_and_the_limit():
    text = " ".join(["word"] * 100)
    parse_search(_body(text, candidates=50), max_candidates=50, max_work=5000)  # 50 x 1 x 100: at the limit
    with pytest.raises(OptionError) as refused:
        parse_search(_body(text + " more", candidates=50), max_candidates=50, max_work=5000)
    reason = str(refused.value)
    assert "50 candidates x 1 passages each x 101 query tokens = 5,050" in reason
    assert "limit of 5,000 (CHUNKRAG_GATEWAY_MAX_WORK)" in reason
    with pytest.raises(OptionError, match="CHUNKRAG_GATEWAY_MAX_WORK"):
        parse_ask(text + " more", {"candidates": 50}, max_candidates=50, max_work=5000)


def test_a_post_search_counts_the_hits_it_asks_for_and_their_passages():
    options = search_options(_body("rotate keys", max_passages=32), max_candidates=50)
    body = {**_body("rotate keys", max_passages=32), "size": 20}
    parse_post_search(body, options, max_work=20 * 32 * 2)
    with pytest.raises(OptionError, match="20 candidates x 32 passages each x 2 query tokens = 1,280"):
        parse_post_search(body, options, max_work=1279)
    # Without a size, Elasticsearch's own default of ten hits.
    parse_post_search({k: v for k, v in body.items() if k != "size"}, options, max_work=10 * 32 * 2)


def test_the_default_limit_takes_the_defaults_with_the_longest_query_of_prose():
    limits = GatewaySettings()
    prose = ("The gateway answers a filtered search with the chunks that hold what the question asks. " * 30)[
        : limits.max_query_chars
    ]
    options = search_options(_body(prose), max_candidates=limits.max_candidates)
    parse_post_search(_body(prose), options, max_work=limits.max_work)
    parse_search(_body(prose, candidates=limits.max_candidates), max_candidates=50, max_work=limits.max_work)
    check_work(estimate(prose, 10, 32), limits.max_work)


def test_budget_s_above_the_gateways_limit_is_refused_naming_it():
    parse_options({"budget_s": 300}, max_budget_s=300)
    with pytest.raises(OptionError) as refused:
        parse_options({"budget_s": 3600}, max_budget_s=300)
    assert str(refused.value) == (
        "ext.chunkrag.budget_s must be above 0 and at most 300 (a number) "
        "(the gateway's max_budget_s, CHUNKRAG_GATEWAY_MAX_BUDGET_S), got 3600"
    )
    with pytest.raises(OptionError, match="at most 3600"):  # without a gateway: the declaration's hour
        parse_options({"budget_s": 3601})


def test_the_limit_is_the_filters_own_budget_unless_set_and_bounds_the_default_too():
    assert Settings().max_budget_s == WorkerSettings().query_budget_s == 300
    lowered = Settings(gateway=GatewaySettings(max_budget_s=20))
    assert lowered.max_budget_s == 20
    client, app = make_client(max_budget_s=20)
    edges = app.state.edges
    assert edges.budget_s(parse_options({})) == 20  # the default budget, never above the limit
    assert edges.budget_s(parse_options({"budget_s": 5})) == 5
    answer = client.post("/idx/_search", json=_body("what does a say", budget_s=3600))
    assert answer.status_code == 400
    assert "at most 20" in answer.json()["error"]["reason"] and "CHUNKRAG_GATEWAY_MAX_BUDGET_S" in answer.text
    within = client.post("/idx/_search", json=_body(" ".join(["w"] * 400), candidates=50))
    assert within.status_code == 200  # 50 x 400 = 20,000: within the default limit
    client, _ = make_client(max_work=100)
    refused = client.post("/idx/_search", json=_body(" ".join(["w"] * 101)))
    assert refused.status_code == 400 and "CHUNKRAG_GATEWAY_MAX_WORK" in refused.json()["error"]["reason"]


def test_the_settings_refuse_a_negative_limit():
    with pytest.raises(ValueError, match="CHUNKRAG_GATEWAY_MAX_WORK"):
        dataclasses.replace(GatewaySettings(), max_work=0)
    with pytest.raises(ValueError, match="CHUNKRAG_GATEWAY_MAX_BUDGET_S"):
        dataclasses.replace(GatewaySettings(), max_budget_s=-1)
