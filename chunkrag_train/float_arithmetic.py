"""The shipped relevance graph: int8 weights, float arithmetic.

onnxruntime's dynamic quantisation (``quantize_dynamic``) stores the MatMul
weights as int8 and quantises each MatMul's *input* at run time, with one
scale for the whole batch tensor: a text's score then depends on the texts
run beside it (and their padding), and on the CPU, because x86 machines
without VNNI multiply u8 by s8 with an instruction that saturates. The filter
cuts on that score, so the same chunk could be kept in one request and
dropped in another, or on another machine.

:func:`float_arithmetic` rewrites such a graph so that each int8 weight is
dequantised (``DequantizeLinear``, its own scale and zero point, exactly the
values the int8 graph multiplied by) and multiplied in float: the file stays
int8-sized (~23 MB) and a text's score is the same alone or in any batch, on
any x86 CPU, to float rounding. onnxruntime folds the dequantised weights
into float constants once, at load, when the session sets
``session.disable_quant_qdq`` (chunkrag_core/providers/local_relevance.py
does); without it onnxruntime would quantise the activations again.

Needs the ``onnx`` package (the ``train`` extra).
"""

from __future__ import annotations

from pathlib import Path


class GraphShapeError(ValueError):
    """The graph is not the dynamic-quantised shape this rewrite reads."""


def float_arithmetic(model):
    """A copy of a ``quantize_dynamic`` graph (an ``onnx.ModelProto``) in which every
    ``DynamicQuantizeLinear -> MatMulInteger -> Cast -> Mul(scales)`` chain is
    ``DequantizeLinear(weight) -> MatMul`` on the float input. Raises
    :class:`GraphShapeError` for a graph without such chains or with one it cannot read."""
    import onnx
    from onnx import helper

    model = onnx.ModelProto.FromString(model.SerializeToString())
    graph = model.graph
    initializers = {i.name for i in graph.initializer}
    producer = {out: node for node in graph.node for out in node.output}
    consumers: dict[str, list] = {}
    for node in graph.node:
        for name in node.input:
            consumers.setdefault(name, []).append(node)

    def only_consumer(name: str, op: str, of: str):
        found = consumers.get(name, [])
        if len(found) != 1 or found[0].op_type != op:
            raise GraphShapeError(f"{of}: expected one {op} after it, found {[n.op_type for n in found]}")
        return found[0]

    replaced: dict[str, list] = {}  # the name of each chain's last node -> its replacement nodes
    dropped: set[str] = set()
    for node in graph.node:
        if node.op_type != "MatMulInteger":
            continue
        if len(node.input) != 4:
            raise GraphShapeError(f"{node.name}: MatMulInteger without both zero points")
        quantised_input, weight, _, weight_zero_point = node.input
        if weight not in initializers:
            raise GraphShapeError(f"{node.name}: its weight {weight} is not a stored constant")
        quantise = producer.get(quantised_input)
        if quantise is None or quantise.op_type != "DynamicQuantizeLinear":
            raise GraphShapeError(f"{node.name}: its input is not quantised at run time")
        cast = only_consumer(node.output[0], "Cast", node.name)
        rescale = only_consumer(cast.output[0], "Mul", cast.name)
        scales = producer.get(next(i for i in rescale.input if i != cast.output[0]))
        weight_scale = [i for i in (scales.input if scales is not None else ()) if i in initializers]
        if scales is None or scales.op_type != "Mul" or len(weight_scale) != 1:
            raise GraphShapeError(f"{node.name}: cannot find its weight's scale")
        dequantised = f"{weight}_dequantized"
        replaced[rescale.name] = [
            helper.make_node(
                "DequantizeLinear", [weight, weight_scale[0], weight_zero_point], [dequantised], name=f"{node.name}_dq"
            ),
            helper.make_node(
                "MatMul", [quantise.input[0], dequantised], [rescale.output[0]], name=node.name.removesuffix("_quant")
            ),
        ]
        dropped.update({node.name, cast.name, rescale.name, scales.name, quantise.name})
    if not replaced:
        raise GraphShapeError("no MatMulInteger in the graph: it is not a dynamic-quantised graph")
    nodes = []
    for node in graph.node:
        if node.name in replaced:
            nodes.extend(replaced[node.name])
        elif node.name not in dropped:
            nodes.append(node)
    del graph.node[:]
    graph.node.extend(nodes)
    onnx.checker.check_model(model)
    return model


def convert_file(source: Path, target: Path) -> int:
    """Rewrite the graph at ``source`` into ``target``; the number of MatMuls rewritten."""
    import onnx

    model = float_arithmetic(onnx.load(str(source)))
    onnx.save(model, str(target))
    return sum(1 for node in model.graph.node if node.op_type == "DequantizeLinear" and node.name.endswith("_dq"))
