"""Producer -> consumer fusion: an elementwise op takes the result of the op before it on chip
(docs/cost-model.md §Fusion).

The compiler fuses an elementwise consumer into its producer (XLA's producer-consumer fusion;
on a NeuronCore the consumer's VectorE/ScalarE/GpSimdE instructions read the producer's tile
from SBUF, or from PSUM straight after a matmul, one tile behind it — the pipelining the graph
model already assumes). So the consumer's read of that operand never reaches HBM. The captured
ops carry shapes, not tensor identities; the graph model already takes every op to consume the
result of the op before it, and this rule names *which* operand that is: the first input with
the producer's element count and dtype (views between them are free and change neither).

What stays conservative: the producer still writes its result to HBM (it may be saved for the
backward pass or read again later — the capture cannot tell), and the consumer's instructions
still run (fusion saves traffic, not engine passes).
"""

from __future__ import annotations

from collections.abc import Sequence

from emulator.capture.ops import OpRecord
from emulator.costmodel.engines import OpKind, classify

NOT_FUSED = -1

# Consumers: elementwise/reduction ops on VectorE, ScalarE or GpSimdE with a result of their own.
# Foreach/multi-tensor ops (optimizer updates over lists) are left out: a list of parameters is
# not the stream of the op before it.
_MAX_CONSUMER_INPUTS = 4
# Producers: any op that writes its result in tiles the next engine can stream.
_PRODUCERS = frozenset({OpKind.MATMUL, OpKind.CONV, OpKind.ATTENTION, OpKind.STREAM, OpKind.GATHER, OpKind.SCATTER})


def fused_input(producer: OpRecord, consumer: OpRecord) -> int:
    """Index of ``consumer``'s input that is ``producer``'s result (taken on chip), or ``NOT_FUSED``."""
    if classify(consumer).kind is not OpKind.STREAM or not consumer.outputs:
        return NOT_FUSED
    if len(consumer.inputs) > _MAX_CONSUMER_INPUTS or classify(producer).kind not in _PRODUCERS:
        return NOT_FUSED
    results = {(t.numel, t.dtype) for t in producer.outputs}
    for i, t in enumerate(consumer.inputs):
        if (t.numel, t.dtype) in results and t.numel > 1:
            return i
    return NOT_FUSED


def fused_inputs(ops: Sequence[OpRecord]) -> tuple[int, ...]:
    """For each op of a captured graph, the input it takes on chip from the device op before it
    (free ops — views, allocations — in between are skipped), or ``NOT_FUSED``."""
    out: list[int] = []
    producer: OpRecord | None = None
    for op in ops:
        kind = classify(op).kind
        out.append(NOT_FUSED if producer is None else fused_input(producer, op))
        if kind is not OpKind.FREE:
            producer = op
    return tuple(out)
