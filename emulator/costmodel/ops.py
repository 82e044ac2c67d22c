"""Simulated time of one captured ATen op on a NeuronCore-v2.

    op seconds = fixed overhead(engine) + max(compute seconds, memory seconds)

- fixed overhead [A4, A7]: every engine access to SBUF/PSUM starts with ~60 cycles at 1.4 GHz;
  TensorE adds one matmul initiation interval (64 cycles at 2.8 GHz); VectorE ~100 cycles at
  1.12 GHz, and ScalarE / GpSimd the same 100 cycles at their 1.4 GHz clock (A4: "same N-cycle
  model as VectorE"); a DMA transfer ~1.3 us. Paid once per op: the instructions of a large op
  issue back to back, so only the first start is exposed.
- compute, TensorE: ``flops / (peak(dtype) * efficiency)`` with the systolic-array tiling
  efficiency of :func:`matmul_efficiency`; peak 95 TFLOPS for BF16/FP16/TF32/cFP8, 23.75 FP32.
  The array writes only PSUM, so each result is copied to SBUF by ScalarE at 128 elements/cycle;
  the two pipeline, the op takes the longer of the two.
- compute, Vector/Scalar/GpSimd: ``passes * streamed elements / 128 lanes / clock``;
  streamed = max(sum of input elements, sum of output elements), which is A4's "one-input op N
  cycles, two-input op 2N"; ``passes`` (table) covers ops made of several instructions.
- compute, DMA: ``bytes moved / (16 engines * 17 GB/s)`` (A7's sustained rate, not the 27 GB/s
  peak); host transfers over the ~16 GB/s link.
- memory: ``HBM bytes read + written / min(HBM 410 GiB/s, 16 DMA engines * 17 GB/s)`` per NC:
  every operand is streamed from HBM and every result written back (no cross-op fusion in SBUF:
  an upper bound on traffic). Prefetching DMA queues hide the 1.3 us per-transfer latency of
  operand streams, so compute ops pay no DMA fixed cost.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from emulator.capture.ops import OpRecord, TensorMeta
from emulator.costmodel.dtypes import CostOptions, device_nbytes, matmul_rate_dtype
from emulator.costmodel.engines import Engine, OpClass, OpKind, classify, normalize_op_name
from emulator.costmodel.fusion import NOT_FUSED
from emulator.hardware.neuroncore_v2 import NEURONCORE_V2, TRAINIUM1, NeuronCoreV2Spec

DEFAULT_OPTIONS = CostOptions()


@dataclass(frozen=True)
class OpCost:
    name: str  # normalized op name
    engine: Engine
    kind: OpKind
    seconds: float  # time the op occupies its engine: overhead + max(compute, memory)
    overhead_seconds: float
    compute_seconds: float
    memory_seconds: float
    hbm_bytes: int
    flops: int  # matmul-family FLOPs (2 per multiply-add); 0 for other ops
    tiles: int  # pipeline granularity (PSUM-bank tiles of 128 x 512 elements) used by the graph model
    known: bool = True

    @property
    def bound(self) -> str:
        """``free``, ``overhead``, ``memory`` or ``compute``: what dominates the op's time."""
        if self.seconds == 0:
            return "free"
        if self.overhead_seconds >= max(self.compute_seconds, self.memory_seconds):
            return "overhead"
        return "memory" if self.memory_seconds > self.compute_seconds else "compute"


# --- catalog-derived rates --------------------------------------------------------------------


def fixed_overhead_seconds(engine: Engine, core: NeuronCoreV2Spec = NEURONCORE_V2) -> float:
    """Per-op fixed start cost of an engine (see module docstring)."""
    access = core.on_chip.access_fixed_cycles.value / core.on_chip.port_clock.base
    issue = core.vector.fixed_overhead_cycles.value
    if engine is Engine.TENSOR:
        return access + core.tensor.matmul_min_cycles.value / core.tensor.clock.base
    if engine is Engine.VECTOR:
        return access + issue / core.vector.clock.base
    if engine is Engine.SCALAR:
        return access + issue / core.scalar.clock.base
    if engine is Engine.GPSIMD:
        return access + issue / core.gpsimd.clock.base
    if engine is Engine.DMA:
        return core.dma.fixed_cost.base
    return 0.0


def dma_bandwidth(core: NeuronCoreV2Spec = NEURONCORE_V2) -> float:
    """Sustained DMA bandwidth of one NC, bytes/s: 16 engines x 17 GB/s (A7's measured "17 B/ns";
    the 27 GB/s per-engine peak of A4/A6 is not reached by sustained streams)."""
    return core.dma.engines_per_nc.value * core.dma.engine_practical.base


def hbm_stream_bandwidth(core: NeuronCoreV2Spec = NEURONCORE_V2) -> float:
    """Bytes/s an NC streams between HBM and SBUF: min(HBM share, aggregate DMA)."""
    return min(core.hbm_bandwidth.base, dma_bandwidth(core))


def dma_tile_bytes(core: NeuronCoreV2Spec = NEURONCORE_V2) -> int:
    """A DMA tile: 128 partitions x 2 KiB, the payload per partition that reaches near-peak DMA rate [A7]."""
    return int(core.on_chip.sbuf_partitions.value * core.dma.min_efficient_bytes_per_partition.base)


def _engine_rate(engine: Engine, core: NeuronCoreV2Spec) -> float:
    """Elements per second of a streaming engine."""
    if engine is Engine.VECTOR:
        return core.vector.elements_per_cycle.value * core.vector.clock.base
    if engine is Engine.SCALAR:
        return core.scalar.elements_per_cycle.value * core.scalar.clock.base
    if engine is Engine.GPSIMD:
        return core.gpsimd.fp32_lanes.value * core.gpsimd.clock.base
    raise ValueError(f"{engine} is not a streaming engine")


def tile_elements(core: NeuronCoreV2Spec = NEURONCORE_V2) -> int:
    """One PSUM-bank tile: 128 partitions x 512 elements (the MultiplyMoving free-size limit)."""
    return int(core.on_chip.sbuf_partitions.value * core.tensor.moving_free_max.value)


# --- TensorE -------------------------------------------------------------------------------------


def _array_cycles(k: int, stationary: int, moving: int, core: NeuronCoreV2Spec) -> int:
    rows, cols = int(core.tensor.array_rows.value), int(core.tensor.array_cols.value)
    free_max, floor = int(core.tensor.moving_free_max.value), int(core.tensor.matmul_min_cycles.value)
    full, rest = divmod(moving, free_max)
    moving_cycles = full * max(free_max, floor) + (max(rest, floor) if rest else 0)
    return math.ceil(k / rows) * math.ceil(stationary / cols) * moving_cycles


def matmul_efficiency(m: int, k: int, n: int, core: NeuronCoreV2Spec = NEURONCORE_V2) -> float:
    """Fraction of the 128x128 array's peak a ``[m,k] @ [k,n]`` product uses.

    The contraction ``k`` fills the array's 128 rows (partitions), one output dimension is the
    stationary operand (128 columns per load), the other streams as the moving operand in
    instructions of <=512 elements, each taking max(free size, 64) cycles [A4]::

        cycles = ceil(k/128) * ceil(stationary/128) * sum over moving chunks of max(chunk, 64)
        efficiency = (m*k*n / 128^2) / min(cycles over the two orientations)
    """
    if min(m, k, n) <= 0:
        return 1.0
    ideal = m * k * n / (core.tensor.array_rows.value * core.tensor.array_cols.value)
    best = min(_array_cycles(k, n, m, core), _array_cycles(k, m, n, core))
    return min(1.0, ideal / best)


_A_OPERAND = {"addmm": 1, "baddbmm": 1, "addbmm": 1, "addmv": 1}


def gemm_dims(op: OpRecord) -> tuple[int, int, int, int] | None:
    """``(batch, m, k, n)`` of a matmul-family op from its shapes, or None if they don't fit."""
    key = normalize_op_name(op.name)
    if not op.outputs:
        return None
    if key in ("outer", "ger"):
        if len(op.inputs) < 2:
            return None
        return 1, op.inputs[0].numel, 1, op.inputs[1].numel
    ai = _A_OPERAND.get(key, 0)
    if len(op.inputs) <= ai:
        return None
    a, shape = op.inputs[ai].shape, op.outputs[0].shape
    k = a[-1] if a else 1
    if key == "linear":
        n = shape[-1] if shape else 1
        return 1, math.prod(shape[:-1]), k, n
    if len(shape) >= 2:
        batch, m, n = math.prod(shape[:-2]), shape[-2], shape[-1]
    elif len(shape) == 1:
        batch, m, n = 1, shape[0], 1
    else:
        batch, m, n = 1, 1, 1
    if key == "addbmm" and len(a) == 3:
        batch = a[0]
    return batch, m, k, n


def _conv_gemms(op: OpRecord) -> tuple[tuple[int, int, int, int], int, str] | None:
    """Implicit GEMM ``(groups, m, k, n)``, number of GEMMs, input dtype of a convolution op."""
    key = normalize_op_name(op.name)
    backward = key.endswith("backward")
    if backward:
        if len(op.inputs) < 3:
            return None
        out, x, w = op.inputs[0], op.inputs[1], op.inputs[2]
        count = sum(1 for t in op.outputs if t.shape in (x.shape, w.shape)) or 1
    else:
        if len(op.inputs) < 2 or not op.outputs:
            return None
        x, w, out = op.inputs[0], op.inputs[1], op.outputs[0]
        count = 1
    if len(x.shape) < 3 or len(w.shape) != len(x.shape) or len(out.shape) != len(x.shape) or w.shape[1] == 0:
        return None
    groups = max(1, x.shape[1] // w.shape[1])
    m = out.shape[0] * math.prod(out.shape[2:])
    k = w.shape[1] * math.prod(w.shape[2:])
    n = w.shape[0] // groups
    return (groups, m, k, n), count, x.dtype


def _gemm_seconds(dims: tuple[int, int, int, int], rate: float, core: NeuronCoreV2Spec) -> tuple[float, int]:
    batch, m, k, n = dims
    flops = 2 * batch * m * k * n
    return flops / (rate * matmul_efficiency(m, k, n, core)), flops


@dataclass(frozen=True)
class AttentionWork:
    """A fused attention op as the flash-attention kernel runs it (docs/cost-model.md §Flash
    attention): each engine's seconds, the GEMMs' FLOPs, the score elements it streams."""

    tensor_seconds: float
    vector_seconds: float
    scalar_seconds: float
    flops: int
    scores: int


_ATTENTION_PASSES = {False: (1.0, 1.0), True: (2.0, 1.0)}  # (VectorE, ScalarE) passes per score, fwd / bwd


def attention_work(op: OpRecord, options: CostOptions, core: NeuronCoreV2Spec) -> AttentionWork | None:
    """The flash-attention kernel on 128-row tiles of queries (nki-samples ``flash_fwd`` /
    ``flash_attn_bwd``): TensorE does the GEMMs and transposes the probability (backward: score
    gradient) tile for the next GEMM (an identity product through the array); per score VectorE
    takes the row maximum forward and ``dS = P (dP - D)`` backward (2 passes), ScalarE the
    exponential with its running row sum (recomputed backward). With a causal mask it skips the
    tiles above the diagonal: the share of FLOPs the op's count (emulator/capture/attention_flops.py)
    leaves of the full product's."""
    backward = normalize_op_name(op.name).endswith("backward")
    qkv = op.inputs[1:4] if backward else op.inputs[0:3]
    if len(qkv) < 3 or min(len(t.shape) for t in qkv) < 2:
        return None
    q, k, v = qkv
    batch, length, e = math.prod(q.shape[:-2]), q.shape[-2], q.shape[-1]
    s, ev = k.shape[-2], v.shape[-1]
    gemms = [(batch, length, e, s), (batch, length, s, ev)]  # S = Q K^T, O = P V
    if backward:  # recompute S, dV = P^T dO, dP = dO V^T, dQ = dS K, dK = dS^T Q
        gemms = [(batch, length, e, s), (batch, s, length, ev), (batch, length, ev, s)]
        gemms += [(batch, length, s, e), (batch, s, length, e)]
    rate = core.tensor.peak(matmul_rate_dtype(q.dtype, options)).base
    tile = int(core.on_chip.sbuf_partitions.value)
    full = sum(2 * b * m * kk * n for b, m, kk, n in gemms)
    share = min(1.0, op.flops / full) if op.flops and normalize_op_name(op.name) in _COUNTS_TILES else 1.0
    tensor_s = sum(_gemm_seconds(dims, rate, core)[0] for dims in [*gemms, (batch, length, tile, s)]) * share
    scores = round(batch * length * s * share)
    vector_passes, scalar_passes = _ATTENTION_PASSES[backward]
    return AttentionWork(
        tensor_s,
        vector_passes * scores / _engine_rate(Engine.VECTOR, core),
        scalar_passes * scores / _engine_rate(Engine.SCALAR, core),
        round(full * share),
        scores,
    )


# ops whose recorded FLOPs count only the tiles the kernel computes (emulator/capture/attention_flops.py)
_COUNTS_TILES = frozenset(
    {"_scaled_dot_product_flash_attention_for_cpu", "_scaled_dot_product_flash_attention_for_cpu_backward"}
)


def psum_evacuation_seconds(elements: int, core: NeuronCoreV2Spec = NEURONCORE_V2) -> float:
    """TensorE writes only PSUM [A4]; ScalarE (or VectorE) copies each result to SBUF at 128 elem/cycle."""
    return elements / _engine_rate(Engine.SCALAR, core)


def _tensor_compute(op: OpRecord, cls: OpClass, options: CostOptions, core: NeuronCoreV2Spec) -> tuple[float, int]:
    """Array time of the GEMMs, or the PSUM evacuation of their results if that is longer (pipelined)."""
    seconds, flops = _array_compute(op, cls, options, core)
    return max(seconds, psum_evacuation_seconds(sum(t.numel for t in op.outputs), core)), flops


def _array_compute(op: OpRecord, cls: OpClass, options: CostOptions, core: NeuronCoreV2Spec) -> tuple[float, int]:
    if cls.kind is OpKind.ATTENTION:
        work = attention_work(op, options, core)
        result = None if work is None else (work.tensor_seconds, work.flops)
    elif cls.kind is OpKind.CONV:
        conv = _conv_gemms(op)
        result = None
        if conv is not None:
            dims, count, dtype = conv
            seconds, flops = _gemm_seconds(dims, core.tensor.peak(matmul_rate_dtype(dtype, options)).base, core)
            result = seconds * count, flops * count
    else:
        gemm = gemm_dims(op)
        result = None
        if gemm is not None:
            dtype = op.inputs[_A_OPERAND.get(normalize_op_name(op.name), 0)].dtype
            result = _gemm_seconds(gemm, core.tensor.peak(matmul_rate_dtype(dtype, options)).base, core)
    if result is None:  # shapes not understood: the recorded FLOPs at the dtype's peak
        dtype = op.inputs[0].dtype if op.inputs else "float32"
        return op.flops / core.tensor.peak(matmul_rate_dtype(dtype, options)).base, op.flops
    return result


# --- streamed elements and bytes -------------------------------------------------------------------


def _list_length(tensors: Sequence[TensorMeta]) -> int:
    """Length of the lists a foreach/fused op's flattened inputs are made of (lists of scalars allowed)."""
    n = len(tensors)
    for length in range(1, n // 2 + 1):
        if n % length:
            continue
        head = [t.shape for t in tensors[:length]]
        chunks = [tensors[i : i + length] for i in range(length, n, length)]
        if all([t.shape for t in c] == head or all(t.numel <= 1 for t in c) for c in chunks):
            return length
    return n


def _written(op: OpRecord, cls: OpClass) -> tuple[TensorMeta, ...]:
    """Tensors an op writes: its outputs, or for in-place ops without results the written input lists."""
    if op.outputs or not op.inputs:
        return op.outputs
    length = _list_length(op.inputs)
    chunks = len(op.inputs) // length
    return tuple(t for i in cls.written_lists if i < chunks for t in op.inputs[i * length : (i + 1) * length])


def streamed_elements(op: OpRecord, cls: OpClass) -> int:
    """Elements a streaming engine processes (before ``passes``)."""
    if cls.kind is OpKind.GATHER:
        return sum(t.numel for t in op.inputs[1:]) + sum(t.numel for t in op.outputs)
    return max(sum(t.numel for t in op.inputs), sum(t.numel for t in _written(op, cls)))


def hbm_read_write(
    op: OpRecord, cls: OpClass, options: CostOptions = DEFAULT_OPTIONS, on_chip: int = NOT_FUSED
) -> tuple[int, int]:
    """HBM bytes an op reads and writes (auto-cast ``all`` shrinks FP32 tensors). A host transfer
    writes HBM (to the device) or reads it (to the host); an on-device copy does both. Input
    ``on_chip`` (``fusion.py``: the result of the op before it) is not read from HBM."""
    if cls.kind is OpKind.FREE:
        return 0, 0
    written = sum(device_nbytes(t, options) for t in _written(op, cls))
    if cls.kind is OpKind.GATHER:  # index tensors + the gathered rows, read once and written once
        return sum(device_nbytes(t, options) for t in op.inputs[1:]) + written, written
    if cls.kind is OpKind.COPY:
        moved = _moved_bytes(op, cls, options)
        return moved, moved
    if cls.kind is OpKind.HOST_COPY:
        moved = _moved_bytes(op, cls, options)
        return (0, moved) if normalize_op_name(op.name).endswith("host_to_device") else (moved, 0)
    return sum(device_nbytes(t, options) for i, t in enumerate(op.inputs) if i != on_chip), written


def hbm_bytes(op: OpRecord, cls: OpClass, options: CostOptions = DEFAULT_OPTIONS, on_chip: int = NOT_FUSED) -> int:
    """HBM bytes read + written by an op."""
    read, write = hbm_read_write(op, cls, options, on_chip)
    return read + write


def _moved_bytes(op: OpRecord, cls: OpClass, options: CostOptions) -> int:
    tensors = _written(op, cls) or op.inputs
    return sum(device_nbytes(t, options) for t in tensors)


# --- the op ---------------------------------------------------------------------------------------


def cost_op(
    op: OpRecord,
    options: CostOptions = DEFAULT_OPTIONS,
    core: NeuronCoreV2Spec = NEURONCORE_V2,
    on_chip: int = NOT_FUSED,
) -> OpCost:
    """Simulated time and traffic of one op (pure function of the record, options and core);
    input ``on_chip`` is taken from the op before it without an HBM read (``fusion.py``)."""
    cls = classify(op)
    name = normalize_op_name(op.name)
    if cls.kind is OpKind.FREE:
        return OpCost(name, cls.engine, cls.kind, 0.0, 0.0, 0.0, 0.0, 0, 0, 0, cls.known)
    traffic = hbm_bytes(op, cls, options, on_chip)
    memory = traffic / hbm_stream_bandwidth(core)
    flops = 0
    if cls.engine is Engine.TENSOR:
        compute, flops = _tensor_compute(op, cls, options, core)
        flops = op.flops or flops
        tiles = math.ceil(sum(t.numel for t in op.outputs) / tile_elements(core))
    elif cls.kind in (OpKind.COPY, OpKind.HOST_COPY):
        moved = _moved_bytes(op, cls, options)
        if cls.kind is OpKind.COPY:
            compute = moved / dma_bandwidth(core)
        else:  # one end is host memory: the host link, not HBM, is the limit
            compute, memory = moved / TRAINIUM1.host_link_bandwidth.base, 0.0
        tiles = math.ceil(moved / dma_tile_bytes(core))
    else:
        work = streamed_elements(op, cls)
        passes = cls.passes
        if cls.kind is OpKind.SORT:
            last = max((t.shape[-1] for t in op.inputs if t.shape), default=1)
            passes *= max(1.0, math.log2(max(2, last)))
        compute = passes * work / _engine_rate(cls.engine, core)
        tiles = math.ceil(work / tile_elements(core))
    overhead = fixed_overhead_seconds(cls.engine, core)
    seconds = overhead + max(compute, memory)
    tiles = max(1, tiles)
    return OpCost(name, cls.engine, cls.kind, seconds, overhead, compute, memory, traffic, flops, tiles, cls.known)
