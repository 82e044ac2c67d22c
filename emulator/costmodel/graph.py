"""Simulated device time of one step graph: engines overlap, dependent ops pipeline tile by tile.

The four compute engines and the DMA queues run asynchronously, synchronised by semaphores the
compiler inserts [A4]. A captured op list carries no data dependencies, so the model assumes the
conservative case — every op consumes the result of the op captured before it (a training step
is mostly such a chain) — and the compiler's usual remedy: ops are tiled (one PSUM bank,
128 x 512 elements; DMA 128 x 2 KiB), so a consumer on *another* engine streams one tile behind
its producer. Ops on the *same* engine run one after the other; so do VectorE and GpSimdE ops,
which cannot access SBUF at the same time [A4]. For op ``i`` on engine ``e`` with
time ``d_i`` (``ops.py``), fixed overhead ``o_i`` and ``k_i`` tiles, tile time ``u_i = (d_i - o_i) / k_i``::

    start_i = max(free_e, start_{i-1} + o_{i-1} + u_{i-1})   # engine free, and producer's first tile out
    end_i   = max(start_i + d_i, end_{i-1} + u_i)            # own work, and one tile after the producer
    free_e  = end_i
    device seconds = max(end_last, total HBM bytes / HBM stream bandwidth, max_e busy_e)

Bounds: ``max_e busy_e <= device seconds <= sum_i d_i`` (the second: no overlap at all). Engine
``e``'s ops occupy disjoint intervals inside ``[0, end_last]``, so its busy time never exceeds the
device time. Collectives run on the CC-cores and are costed separately (``collectives.py``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType

from emulator.capture.ops import OpRecord
from emulator.costmodel.dtypes import CostOptions
from emulator.costmodel.engines import BUSY_ENGINES, Engine
from emulator.costmodel.fusion import NOT_FUSED, fused_inputs
from emulator.costmodel.ops import DEFAULT_OPTIONS, OpCost, hbm_stream_bandwidth
from emulator.costmodel.parts import cost_op_parts
from emulator.costmodel.sdk import era_of
from emulator.hardware.neuroncore_v2 import NEURONCORE_V2, NeuronCoreV2Spec

# The compiler efficiency every modelled time is divided by is the SDK era's (one FITTED constant
# per era: emulator/costmodel/sdk.py), chosen by CostOptions.sdk.


@dataclass(frozen=True)
class GraphCost:
    device_seconds: float  # simulated execution time of the graph on one NeuronCore
    busy: Mapping[str, float]  # engine name -> busy seconds (tensor, vector, scalar, gpsimd, dma)
    flops: int  # sum of op FLOPs (matmul family)
    hbm_bytes: int  # HBM bytes read + written
    hbm_seconds: float  # hbm_bytes at the stream bandwidth: a lower bound of device_seconds
    serial_seconds: float  # sum of op times: device time if nothing overlapped
    op_count: int  # captured ops
    device_op_count: int  # ops that cost time (not views / allocations)
    unknown_ops: tuple[str, ...]  # normalized names costed with the unknown-op default
    ops: tuple[OpCost, ...]  # the ops' parts (emulator/costmodel/parts.py), in order
    efficiency: float = 1.0  # every op time above is the per-op model's / this
    owners: tuple[int, ...] = ()  # each part's captured op (empty: one part per op)
    fused: tuple[int, ...] = ()  # each captured op's input taken on chip (fusion.py; empty: none)

    def on_chip(self, op: int) -> int:
        """Input of captured op ``op`` read on chip from the op before it, or ``NOT_FUSED`` (``fusion.py``)."""
        return self.fused[op] if self.fused else NOT_FUSED

    def owner(self, part: int) -> int:
        return self.owners[part] if self.owners else part

    def op_spans(self) -> list[tuple[float, float]]:
        """``(start, end)`` of each op on its engine, seconds from the graph's start: the schedule
        of the module docstring, each op busy for its own time (an engine then waits, if at all,
        for the producer's last tile); a free op is ``(t, t)``."""
        e = self.efficiency
        return [(start / e, (start + c.seconds) / e) for (start, _), c in zip(spans(self.ops), self.ops, strict=True)]

    def utilization(self, engine: str) -> float:
        """Busy fraction of an engine during the graph (0..1)."""
        return self.busy[engine] / self.device_seconds if self.device_seconds else 0.0

    @property
    def tensor_utilization(self) -> float:
        """TensorE busy fraction: the closest analogue of the NeuronCore utilization the tools show."""
        return self.utilization(Engine.TENSOR.value)


# VectorE and GpSimdE cannot access SBUF at the same time [A4]: they share one issue slot here.
_SLOT: dict[Engine, Engine] = {Engine.GPSIMD: Engine.VECTOR}


def spans(costs: Sequence[OpCost]) -> list[tuple[float, float]]:
    """``(start, end)`` of each op of the pipelined chain of ``costs`` (see module docstring);
    ``(t, t)`` for a free op, at the end of the op before it."""
    free: dict[Engine, float] = {}
    prev_start = prev_first = prev_end = 0.0
    out: list[tuple[float, float]] = []
    for c in costs:
        if c.seconds == 0:
            out.append((prev_end, prev_end))
            continue
        slot = _SLOT.get(c.engine, c.engine)
        tile = (c.seconds - c.overhead_seconds) / c.tiles
        start = max(free.get(slot, 0.0), prev_start + prev_first)
        end = max(start + c.seconds, prev_end + tile)
        free[slot] = end
        prev_start, prev_first, prev_end = start, c.overhead_seconds + tile, end
        out.append((start, end))
    return out


def schedule(costs: Sequence[OpCost]) -> float:
    """End time of the pipelined chain of ``costs`` (see module docstring)."""
    chain = spans(costs)
    return chain[-1][1] if chain else 0.0


def cost_graph(
    ops: Sequence[OpRecord],
    options: CostOptions = DEFAULT_OPTIONS,
    core: NeuronCoreV2Spec = NEURONCORE_V2,
    efficiency: float | None = None,
) -> GraphCost:
    """Device time, per-engine busy time, FLOPs and HBM traffic of one captured graph; every
    time is the per-op model's divided by ``efficiency`` (default: the compiler efficiency of
    ``options.sdk``'s era; 1.0 gives the bare per-op model)."""
    if efficiency is None:
        efficiency = era_of(options.sdk).efficiency
    if not 0 < efficiency <= 1.5:
        raise ValueError(f"efficiency {efficiency!r} must be in (0, 1.5]")
    fused = fused_inputs(ops)
    parts = [cost_op_parts(op, options, core, on_chip) for op, on_chip in zip(ops, fused, strict=True)]
    costs = tuple(c for op_parts in parts for c in op_parts)
    owners = tuple(i for i, op_parts in enumerate(parts) for _ in op_parts)
    busy = {e.value: 0.0 for e in BUSY_ENGINES}
    for c in costs:
        if c.engine is not Engine.NONE:
            busy[c.engine.value] += c.seconds / efficiency
    traffic = sum(c.hbm_bytes for c in costs)
    hbm_seconds = traffic / hbm_stream_bandwidth(core) / efficiency
    device = max(schedule(costs) / efficiency, hbm_seconds, max(busy.values()))
    return GraphCost(
        device_seconds=device,
        busy=MappingProxyType(busy),
        flops=sum(c.flops for c in costs),
        hbm_bytes=traffic,
        hbm_seconds=hbm_seconds,
        serial_seconds=sum(c.seconds for c in costs) / efficiency,
        op_count=len(ops),
        device_op_count=len({i for i, c in zip(owners, costs, strict=True) if c.seconds > 0}),
        unknown_ops=tuple(sorted({c.name for c in costs if not c.known})),
        ops=costs,
        efficiency=efficiency,
        owners=owners,
        fused=fused,
    )
