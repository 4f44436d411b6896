"""The project's relevance model: its features, its place in the filter, its training pairs.

The filter tests inject a scripted relevance model (a unit-test double); the
last tests load the real shipped graph with onnxruntime.
"""

import math

import pytest

from chunkrag_core.chunk import Chunk
from chunkrag_filter.pipeline import FilterOptions, run_filter
from chunkrag_filter.processors.calibration import (
    RELEVANCE_LOGIT_CLIP,
    Calibrated,
    CalibrationError,
    LogisticModel,
    chunk_features,
    load_calibration,
    relevance_logit,
    write_calibration,
)
from chunkrag_train.pairs import chunks_of, holds_answer


class ScriptedRelevance:
    """Scores by text, and counts its calls and the texts it read."""

    def __init__(self, by_text):
        self.by_text, self.calls, self.read = by_text, 0, []

    def score(self, query, texts):
        self.calls += 1
        self.read.extend(texts)
        return [self.by_text[t] for t in texts]

    def rerank(self, query, texts):
        return sorted(enumerate(self.score(query, texts)), key=lambda p: -p[1])


def chunk(i, text):
    return Chunk(doc_id="d", position=i, text=text, start=0, end=1, vector=[1.0, 0.0], score=1.0 - i / 10)


CHUNKS = [chunk(0, "alpha"), chunk(1, "beta"), chunk(2, "gamma")]
SCORES = {"alpha": 0.2, "beta": 0.9, "gamma": 0.01}
# A calibration that reads only the relevance model: P = sigmoid(logit), so
# the filter's score is the model's probability.
ONLY_RELEVANCE = LogisticModel(("relevance_logit",), (1.0,), 0.0)


def test_relevance_logit_inverts_the_probability_and_is_clipped():
    assert relevance_logit(0.5) == 0.0
    assert relevance_logit(0.9) == pytest.approx(math.log(9))
    assert relevance_logit(1.0) == RELEVANCE_LOGIT_CLIP
    assert relevance_logit(0.0) == -RELEVANCE_LOGIT_CLIP
    assert relevance_logit(None) == 0.0


def test_chunk_features_carry_the_relevance_logit_and_its_gap_to_the_best():
    rows = chunk_features([{"relevance": 0.9}, {"relevance": 0.5}, {}], [None] * 3, [100, 100, 100])
    assert [round(r["relevance_logit"], 4) for r in rows] == [round(math.log(9), 4), 0.0, 0.0]
    assert [round(r["relevance_gap"], 4) for r in rows] == [0.0, round(-math.log(9), 4), round(-math.log(9), 4)]


def test_the_filter_scores_every_candidate_with_the_relevance_model_and_cuts_on_it():
    model = ScriptedRelevance(SCORES)
    options = FilterOptions(gate="off", relevance="crossencoder", calibration=ONLY_RELEVANCE, fixed_threshold=0.15)
    result = run_filter("q", CHUNKS, model=None, options=options, relevance_model=model)
    assert model.calls == 1
    assert [c.text for c in result.kept] == ["alpha", "beta"]  # the retrieval order is kept
    scores = {d.chunk.text: d.chunk.stage_scores for d in result.decisions}
    assert scores["beta"]["relevance"] == 0.9
    assert scores["beta"]["combined"] == pytest.approx(0.9, abs=1e-6)
    assert [d.reason for d in result.decisions if d.chunk.text == "gamma"] == ["below_threshold"]
    assert "relevance" in result.timings_ms


def test_rerank_local_orders_the_kept_chunks_by_the_relevance_model():
    model = ScriptedRelevance(SCORES)
    options = FilterOptions(gate="off", calibration=None, threshold="fixed", fixed_threshold=0.0, rerank="local")
    result = run_filter("q", CHUNKS, model=None, options=options, relevance_model=model)
    assert [c.text for c in result.kept] == ["beta", "alpha", "gamma"]
    assert result.kept[0].stage_scores["rerank"] == 0.9


def test_with_relevance_and_rerank_local_each_text_is_read_once_and_ordered_by_its_score():
    model = ScriptedRelevance({"alpha": 0.2, "beta": 0.9, "gamma": 0.35})
    options = FilterOptions(
        gate="off",
        relevance="crossencoder",
        calibration=ONLY_RELEVANCE,
        fixed_threshold=0.15,
        rerank="local",
        fallback_k=1,
    )
    result = run_filter("q", CHUNKS, model=None, options=options, relevance_model=model)
    assert model.read == ["alpha", "beta", "gamma"]  # the kept ones were not read a second time
    assert [c.text for c in result.kept] == ["beta", "gamma", "alpha"]
    assert [c.stage_scores["rerank"] for c in result.kept] == [0.9, 0.35, 0.2]
    # The scores reused are the model's own, not the rounded stage scores.
    precise = ScriptedRelevance({"alpha": 0.2000001, "beta": 0.2000004, "gamma": 0.01})
    kept = run_filter("q", CHUNKS, model=None, options=options, relevance_model=precise).kept
    assert [c.text for c in kept] == ["beta", "alpha"] and precise.read == ["alpha", "beta", "gamma"]


def test_the_retrieval_default_never_calls_the_relevance_model():
    model = ScriptedRelevance(SCORES)
    run_filter("q", CHUNKS, model=None, options=FilterOptions(gate="off"), relevance_model=model)
    assert model.calls == 0


def test_an_unknown_relevance_source_is_refused_with_the_choices():
    with pytest.raises(ValueError, match="relevance 'bert'.*retrieval, crossencoder"):
        FilterOptions(relevance="bert")


def test_a_calibration_file_without_a_relevance_model_names_the_way_out(tmp_path):
    path = write_calibration(tmp_path / "c.json", Calibrated(LogisticModel(("cosine",), (1.0,), 0.0), 0.4), None)
    with pytest.raises(CalibrationError, match=r"relevance \[retrieval\]"):
        load_calibration(str(path)).for_judging(False, relevance_model=True)


def test_a_calibration_file_round_trips_its_relevance_model(tmp_path):
    retrieval = Calibrated(LogisticModel(("cosine",), (1.0,), 0.0), 0.4)
    relevance = Calibrated(ONLY_RELEVANCE, 0.3)
    path = write_calibration(tmp_path / "c.json", retrieval, None, relevance=relevance)
    loaded = load_calibration(str(path))
    assert loaded.for_judging(False, relevance_model=True) == relevance
    assert loaded.for_judging(False) == retrieval


def test_the_shipped_calibration_has_a_relevance_model_that_reads_the_relevance_model():
    chosen = load_calibration(None).for_judging(False, relevance_model=True)
    assert chosen.model.uses_relevance
    assert 0.0 < chosen.cut < 1.0


def test_training_chunks_pack_whole_sentences_up_to_the_size():
    text = "One is here. Two is there. Three is far away from both."
    assert [text[s:e] for s, e in chunks_of(text, 1)] == [
        "One is here.",
        "Two is there.",
        "Three is far away from both.",
    ]
    assert [text[s:e] for s, e in chunks_of(text, 30)] == ["One is here. Two is there.", "Three is far away from both."]


def test_a_negative_holding_an_answer_string_is_recognised_case_insensitively():
    assert holds_answer("Born in PARIS in 1900.", ["paris"])
    assert not holds_answer("Born in Lyon.", ["Paris", " "])


def test_the_shipped_model_prefers_the_chunk_that_answers():
    from chunkrag_core.providers.local_relevance import LocalRelevanceModel

    model = LocalRelevanceModel()
    scores = model.score(
        "Where was Marie Curie born?",
        [
            "Marie Curie was born in Warsaw, in what was then the Kingdom of Poland.",
            "The Eiffel Tower was completed in 1889 for the World's Fair in Paris.",
        ],
    )
    assert all(0.0 <= s <= 1.0 for s in scores)
    assert scores[0] > scores[1]


def test_the_shipped_model_scores_an_empty_list_and_long_text():
    from chunkrag_core.providers.local_relevance import LocalRelevanceModel

    model = LocalRelevanceModel()
    assert model.score("q", []) == []
    (score,) = model.score("what is it?", ["word " * 5000])  # cut to the model's length, not an error
    assert 0.0 <= score <= 1.0


def test_the_cut_keeps_a_relevant_chunk_for_the_share_of_questions_asked():
    from chunkrag_train.cut import choose_cut
    from chunkrag_train.pairs import Pair

    def pair(group, label):
        return Pair("q", "t", label, "nq", group, "validation")

    pairs = [pair(f"g{i}", 1) for i in range(10)] + [pair("g0", 0)]
    scores = [0.05, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 0.99]
    # 10 questions: keeping 90% allows one loss, so the cut is the second-lowest best score.
    assert choose_cut(pairs, scores, keep=0.9) == 0.1
    assert choose_cut(pairs, scores, keep=1.0) == 0.05
    with pytest.raises(ValueError):
        choose_cut([pair("g", 0)], [0.5])


def test_another_graph_is_read_from_its_path_and_a_missing_one_is_named(tmp_path):
    from chunkrag_core.artifacts import RELEVANCE_ONNX
    from chunkrag_core.providers.local_relevance import LocalRelevanceModel, RelevanceError

    texts = ["Marie Curie was born in Warsaw.", "The Eiffel Tower is in Paris."]
    shipped = LocalRelevanceModel().score("Where was Marie Curie born?", texts)
    by_path = LocalRelevanceModel(path=RELEVANCE_ONNX.locate()).score("Where was Marie Curie born?", texts)
    assert by_path == shipped
    with pytest.raises(RelevanceError, match="no relevance model at .*nowhere.onnx; leave the path out"):
        LocalRelevanceModel(path=tmp_path / "nowhere.onnx").load()


def test_a_shorter_cut_reads_fewer_word_pieces_and_a_long_query_is_cut_not_refused():
    from chunkrag_core.providers.local_relevance import MAX_TOKENS, LocalRelevanceModel

    long_text = "word " * 500
    assert LocalRelevanceModel().token_counts("what is it?", [long_text, "short"]) == [MAX_TOKENS, 8]
    model = LocalRelevanceModel(max_tokens=64)
    assert model.token_counts("what is it?", [long_text]) == [64]
    (score,) = model.score("a very long question " * 30, [long_text])  # the query alone is over 64 pieces
    assert 0.0 <= score <= 1.0
    with pytest.raises(ValueError, match="max_tokens must be at least 32"):
        LocalRelevanceModel(max_tokens=8)


# Texts of very different lengths, so a batch pads most of them.
MIXED_TEXTS = [
    "To rotate an API key, open the console and press Rotate.",
    "Lunch is at noon.",
    "API keys expire after 90 days; rotating them early is allowed and recommended for production systems "
    "that handle payments or personal data, and the old key keeps working for one hour after the rotation.",
    "Invoices are sent monthly by email to the billing contact of the account.",
    "Rotate.",
]


def test_a_texts_score_does_not_depend_on_the_texts_beside_it_or_the_batch_or_the_threads():
    """The filter cuts on this score: one chunk must get the same decision
    alone, in any request's batch, with any thread count, on any CPU kind
    (the graph multiplies in float; a dynamic-int8 graph moved a score by up
    to 0.02 with its batch and differed between CPUs with and without VNNI)."""
    from chunkrag_core.providers.local_relevance import LocalRelevanceModel

    query = "How do I rotate the API keys?"
    batched = LocalRelevanceModel().logits(query, MIXED_TEXTS)
    alone = [LocalRelevanceModel(batch_size=1).logits(query, [t])[0] for t in MIXED_TEXTS]
    one_thread = LocalRelevanceModel(threads=1, batch_size=3).logits(query, MIXED_TEXTS[::-1])[::-1]
    assert list(batched) == pytest.approx(alone, abs=1e-4)
    assert list(batched) == pytest.approx(list(one_thread), abs=1e-4)
    assert batched[0] > batched[1] and batched[0] > batched[3]  # it still reads: the answer beats the noise


def test_the_gateways_model_shrinks_its_memory_after_each_run_and_scores_the_same():
    from chunkrag_core.providers.local_relevance import LocalRelevanceModel

    query = "How do I rotate the API keys?"
    returning = LocalRelevanceModel(threads=1, return_memory=True)
    assert list(returning.logits(query, MIXED_TEXTS)) == pytest.approx(
        list(LocalRelevanceModel().logits(query, MIXED_TEXTS)), abs=1e-4
    )
    assert returning._run_options.get_run_config_entry("memory.enable_memory_arena_shrinkage") == "cpu:0"


def test_the_gateways_malloc_settings_leave_the_scores_bits_alone():
    # `chunkrag serve` caps glibc's arenas and fixes its mmap threshold before
    # any thread starts (chunkrag_gateway/allocator.py): in a process of its own,
    # the gateway's model (its batch, one thread, its arena shrunk after each run).
    import json
    import subprocess
    import sys

    from chunkrag_core.providers.local_relevance import LocalRelevanceModel

    code = """
import json, sys
from chunkrag_gateway.allocator import fix_mmap_threshold, limit_malloc_arenas
limit_malloc_arenas(environ={}), fix_mmap_threshold(environ={})
from chunkrag_core.providers.local_relevance import LocalRelevanceModel
from chunkrag_gateway.edges import GATEWAY_RELEVANCE_BATCH
model = LocalRelevanceModel(threads=1, batch_size=GATEWAY_RELEVANCE_BATCH, return_memory=True)
print(model.logits(*json.loads(sys.argv[1])).tobytes().hex())
"""
    query = "How do I rotate the API keys?"
    argument = json.dumps([query, MIXED_TEXTS])
    served = subprocess.run([sys.executable, "-c", code, argument], capture_output=True, text=True, check=True)
    assert served.stdout.strip() == LocalRelevanceModel(threads=1).logits(query, MIXED_TEXTS).tobytes().hex()


def test_the_shipped_graph_computes_in_float_as_the_unoptimised_graph_does():
    """Whatever onnxruntime's optimiser would fuse on this CPU (a quantised
    MatMul where VNNI or AMX is present), the session computes what the
    graph says, op by op, in float."""
    import numpy as np
    import onnxruntime

    from chunkrag_core.artifacts import RELEVANCE_ONNX, verified_path
    from chunkrag_core.providers.local_relevance import LocalRelevanceModel

    model = LocalRelevanceModel(batch_size=len(MIXED_TEXTS))
    query = "How do I rotate the API keys?"
    shipped = model.logits(query, MIXED_TEXTS)
    options = onnxruntime.SessionOptions()
    options.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_DISABLE_ALL
    plain = onnxruntime.InferenceSession(
        str(verified_path(RELEVANCE_ONNX)), options, providers=["CPUExecutionProvider"]
    )
    encodings = model._encode(query, MIXED_TEXTS)
    width = max(len(e.ids) for e in encodings)
    ids = np.zeros((len(encodings), width), dtype=np.int64)
    types, mask = np.zeros_like(ids), np.zeros_like(ids)
    for row, e in enumerate(encodings):
        ids[row, : len(e.ids)], types[row, : len(e.ids)], mask[row, : len(e.ids)] = e.ids, e.type_ids, 1
    (reference,) = plain.run(None, {"input_ids": ids, "attention_mask": mask, "token_type_ids": types})
    assert list(shipped) == pytest.approx(list(reference[:, 0]), abs=1e-4)
    assert not any(node in ("MatMulInteger", "DynamicQuantizeLinear") for node in _op_types(RELEVANCE_ONNX))


def _op_types(artifact) -> set[str]:
    import onnx

    from chunkrag_core.artifacts import verified_path

    return {node.op_type for node in onnx.load(str(verified_path(artifact))).graph.node}


def test_a_dynamic_int8_graph_is_rewritten_to_its_int8_weights_multiplied_in_float(tmp_path):
    """chunkrag_train/float_arithmetic.py on a graph quantised as the export
    quantises the model: the rewrite multiplies each input by exactly the
    dequantised int8 weights, so a row's output no longer depends on the other
    rows (the dynamic graph quantises the whole batch with one scale)."""
    import numpy as np
    import onnx
    import onnxruntime
    from onnx import TensorProto, helper, numpy_helper
    from onnxruntime.quantization import QuantType, quantize_dynamic

    from chunkrag_train.float_arithmetic import GraphShapeError, convert_file, float_arithmetic

    rng = np.random.default_rng(5)
    weight = rng.normal(size=(16, 8)).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["y"], name="dense")],
        "dense",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["rows", 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["rows", 8])],
        [numpy_helper.from_array(weight, "w")],
    )
    fp32, int8, rewritten = tmp_path / "fp32.onnx", tmp_path / "int8.onnx", tmp_path / "float.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), str(fp32))
    quantize_dynamic(str(fp32), str(int8), weight_type=QuantType.QInt8)
    assert convert_file(int8, rewritten) == 1
    ops = [node.op_type for node in onnx.load(str(rewritten)).graph.node]
    assert "MatMulInteger" not in ops and "DynamicQuantizeLinear" not in ops and "MatMul" in ops

    def run(path, x):
        options = onnxruntime.SessionOptions()
        options.add_session_config_entry("session.disable_quant_qdq", "1")
        session = onnxruntime.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
        return session.run(None, {"x": x})[0]

    small = rng.normal(size=(1, 16)).astype(np.float32)
    batch = np.vstack([small, 50 * rng.normal(size=(3, 16)).astype(np.float32)])  # a loud neighbour
    stored = {i.name: numpy_helper.to_array(i) for i in onnx.load(str(int8)).graph.initializer}
    (name,) = [n for n in stored if stored[n].dtype == np.int8 and stored[n].ndim == 2]
    prefix = name.removesuffix("_quantized")
    dequantised = (stored[name].astype(np.float32) - stored[f"{prefix}_zero_point"]) * stored[f"{prefix}_scale"]
    assert run(rewritten, batch)[0] == pytest.approx(run(rewritten, small)[0], abs=1e-5)
    assert run(rewritten, small)[0] == pytest.approx((small @ dequantised)[0], abs=1e-4)
    # The dynamic graph itself: the loud neighbour moves the quiet row.
    assert not np.allclose(run(int8, batch)[0], run(int8, small)[0], atol=1e-5)
    with pytest.raises(GraphShapeError, match="not a dynamic-quantised graph"):
        float_arithmetic(onnx.load(str(fp32)))
