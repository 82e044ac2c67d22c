"""Simulated compile time of a new step graph and the size of its NEFF ("model code").

On Neuron a new graph (new hash of ops and shapes) is lowered to HLO and compiled by neuronx-cc
into a NEFF before it runs; later steps hit the compile cache [A19]. The sources give no compile
times (docs/reference/trn1-runtime.md §Compile cache), so this is an explicit, documented
*assumption*, not a measurement:

    seconds          = COMPILE_BASE_SECONDS + COMPILE_SECONDS_PER_OP * device ops
    model_code_bytes = NEFF_BASE_BYTES + NEFF_BYTES_PER_OP * device ops

- the base covers starting the compiler process, HLO import and NEFF packaging; the per-op term
  stands for scheduling / allocation passes, which grow about linearly with the instruction
  count. With 1 s + 4 ms per op a small MLP step (~50 ops) compiles in ~1.2 s and a BERT-Large
  training micro-step (~1,800 device ops) in ~8 s, chosen so an
  emulated first step stays interactive. Callers may pass their own constants.
- view/allocation ops (free) emit no instructions and are not counted.
- NEFF size: 1 MiB of header, metadata and DMA-ring descriptors plus 4 KiB of instruction
  streams per device op (compiled loops keep code size independent of tensor size).

The ~96 MB of micro-code the runtime counts as "model code" [A18] is per physical NeuronCore,
not per graph: :func:`runtime_model_code_overhead_bytes` gives it for the memory ledger to count
once per core.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from emulator.capture.ops import OpRecord
from emulator.costmodel.engines import OpKind, classify_name
from emulator.hardware.neuroncore_v2 import NEURONCORE_V2, NeuronCoreV2Spec

COMPILE_BASE_SECONDS = 1.0  # assumption, see module docstring
COMPILE_SECONDS_PER_OP = 4e-3  # assumption
NEFF_BASE_BYTES = 1 << 20  # assumption
NEFF_BYTES_PER_OP = 4 << 10  # assumption


@dataclass(frozen=True)
class CompileCost:
    seconds: float  # simulated neuronx-cc time for this graph
    model_code_bytes: int  # NEFF bytes loaded as "model code" (per graph)
    device_ops: int  # ops that emit instructions


def device_op_count(ops: Sequence[OpRecord]) -> int:
    """Ops that emit instructions (everything but views and allocations)."""
    return sum(1 for op in ops if classify_name(op.name).kind is not OpKind.FREE)


def compile_cost(
    ops: Sequence[OpRecord],
    *,
    base_seconds: float = COMPILE_BASE_SECONDS,
    seconds_per_op: float = COMPILE_SECONDS_PER_OP,
    base_bytes: int = NEFF_BASE_BYTES,
    bytes_per_op: int = NEFF_BYTES_PER_OP,
) -> CompileCost:
    """Compile time and NEFF size of a graph: linear in the number of device ops."""
    n = device_op_count(ops)
    return CompileCost(base_seconds + seconds_per_op * n, base_bytes + bytes_per_op * n, n)


def runtime_model_code_overhead_bytes(core: NeuronCoreV2Spec = NEURONCORE_V2) -> int:
    """Micro-code bytes counted as model code once per physical NeuronCore (~96 MB [A18])."""
    return int(core.model_code_overhead.base)
