"""Each engine's profile (``chunkrag_core/engines/profile.py``), as values:
the engine a configuration chooses, the settings it reads, what it can do
for the gateway."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from chunkrag_core.engines.profile import ELASTICSEARCH, OPENSEARCH, engine_of, profile_for
from chunkrag_core.settings import Settings

ROOT = Path(__file__).resolve().parents[2]


def test_an_unknown_engine_is_named_with_the_choices():
    assert profile_for("opensearch") is OPENSEARCH and profile_for("elasticsearch") is ELASTICSEARCH
    with pytest.raises(ValueError, match="'solr'; choose one of elasticsearch, opensearch"):
        profile_for("solr")


@pytest.mark.parametrize(
    "env, engine",
    [
        ({}, "elasticsearch"),
        ({"ES_URL": "http://es:9200"}, "elasticsearch"),
        ({"OPENSEARCH_URL": "http://os:9200"}, "opensearch"),
        ({"OPENSEARCH_URL": "http://os:9200", "ES_URL": "http://es:9200"}, "elasticsearch"),
        ({"OPENSEARCH_URL": "", "ES_URL": ""}, "elasticsearch"),
        ({"OPENSEARCH_URL": "http://os:9200", "SEARCH_BACKEND": "Elasticsearch"}, "elasticsearch"),
    ],
)
def test_the_engine_a_url_alone_chooses(env, engine):
    assert Settings.from_env(env).search_backend == engine


def test_the_settings_read_the_chosen_engines_fields():
    settings = Settings(es_url="http://es:9200", es_ca_certs="es.pem", opensearch_url="http://a:1,http://b:2")
    assert (settings.search_url, settings.search_nodes, settings.search_ca_certs) == (
        "http://es:9200",
        ("http://es:9200",),
        "es.pem",
    )
    settings = dataclasses.replace(settings, search_backend="opensearch", opensearch_ca_certs="os.pem")
    assert (settings.search_url, settings.search_nodes, settings.search_ca_certs) == (
        "http://a:1,http://b:2",
        ("http://a:1", "http://b:2"),
        "os.pem",
    )
    assert engine_of(settings) is OPENSEARCH and OPENSEARCH.url_variable == "OPENSEARCH_URL"


def test_only_opensearch_signs_and_only_elasticsearch_takes_api_keys_and_derives_them():
    signed = Settings(opensearch_auth="sigv4", opensearch_aws_region="eu-west-1", opensearch_aws_service="aoss")
    assert OPENSEARCH.sigv4(signed) == ("eu-west-1", "aoss") and ELASTICSEARCH.sigv4(signed) is None
    assert OPENSEARCH.sigv4(Settings()) is None and ELASTICSEARCH.request_signer(signed) is None
    assert (ELASTICSEARCH.api_key_auth, ELASTICSEARCH.derived_keys) == (True, True)
    assert (OPENSEARCH.api_key_auth, OPENSEARCH.derived_keys) == (False, False)
