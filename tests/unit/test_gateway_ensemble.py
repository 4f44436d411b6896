"""ext.chunkrag.ensemble: decoded by the gateway's dialect, resolved to
scales by its edges, and shown with each chunk's scale."""

import dataclasses

import pytest

from chunkrag_core.chunk import Chunk
from chunkrag_gateway.dialect import OptionError, ensemble_scales, parse_options, segment_id, source_of
from search_extension.segments import Segment


def options(raw):
    return parse_options(raw, max_candidates=50)


def test_ensemble_is_off_by_default_true_means_the_gateways_scales_or_a_list():
    assert options({}).ensemble is None
    assert options({"ensemble": False}).ensemble is None
    assert options({"ensemble": True}).ensemble == ()
    assert options({"ensemble": [2000, 128, 128]}).ensemble == (128, 2000)


@pytest.mark.parametrize("bad", ["yes", [], [0], [1.5], {"scales": [128]}])
def test_a_bad_ensemble_value_is_an_option_error_naming_it(bad):
    with pytest.raises(OptionError, match="ext.chunkrag.ensemble"):
        options({"ensemble": bad})


def test_true_resolves_to_the_configured_scales_else_the_defaults():
    assert ensemble_scales(options({"ensemble": True}).ensemble, ()) == (128, 512, 2000)
    assert ensemble_scales(options({"ensemble": True}).ensemble, (256,)) == (256,)
    assert ensemble_scales(options({"ensemble": [64]}).ensemble, (256,)) == (64,)
    assert ensemble_scales(options({}).ensemble, (256,)) is None


def test_scaled_chunks_and_segments_name_their_scale():
    chunk = Chunk(doc_id="d", position=2, text="abc", start=5, end=8, scale=512)
    assert source_of(chunk)["scale"] == 512
    segment = Segment("d", 2, 4, 1.0, 5, 20, "x" * 15, (chunk,), 512)
    assert segment_id(segment) == "d:2-3@512"
    assert segment_id(dataclasses.replace(segment, scale=0)) == "d:2-3"
