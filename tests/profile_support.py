"""Synthetic captures for the neuron-profile tests, written with the contract's own writers (no
emulator, no torch). Times are whole microseconds so that every derived figure is exact.

The two-rank capture: one graph of six costed ops (TensorE, VectorE, DMA, TensorE, ScalarE,
GpSimd) and one all-reduce after captured op 4; rank 0 healthy (collective 100 µs), rank 1 on a
core twice as slow with a 400 µs all-reduce (an outlier of its group). The graph ends 60 µs after
its last op (HBM bound).
"""

from __future__ import annotations

from pathlib import Path

from neurontools.contract import profile as p

US = 1e-6
GRAPH_HASH = "abc123def4567890"
GRAPH_NAME = "train_step"
MONO = 1000.0
EPOCH = 1_700_000_000.0
START = 1010.0
OPS = (  # name, engine, start µs, end µs, captured index, flops
    ("aten::mm", "tensor", 0, 100, 0, 2_000_000),
    ("aten::add", "vector", 100, 150, 2, 0),
    ("aten::copy_", "dma", 150, 200, 3, 0),
    ("aten::mm", "tensor", 200, 300, 5, 2_000_000),
    ("aten::gelu", "scalar", 300, 320, 6, 0),
    ("aten::topk", "gpsimd", 320, 340, 7, 0),
)
COMPUTE_US = 400  # 60 µs after the last op: HBM bound
CC_BYTES = 1 << 20
ENGINE_KEYS = ("tensor", "vector", "scalar", "gpsimd", "dma")


def busy_seconds() -> dict[str, float]:
    busy = dict.fromkeys(ENGINE_KEYS, 0.0)
    for _, engine, start, end, _, _ in OPS:
        busy[engine] += (end - start) * US
    return busy


def graph(wait_op: int | None = None) -> p.GraphSchedule:
    cols = list(zip(*OPS, strict=True))
    ops = p.OpTable(
        name=cols[0],
        engine=cols[1],
        rule=tuple("compute/x" for _ in OPS),
        start=tuple(s * US for s in cols[2]),
        end=tuple(e * US for e in cols[3]),
        flops=cols[5],
        hbm_read=tuple(1000 for _ in OPS),
        hbm_write=tuple(500 for _ in OPS),
        shapes=tuple("bfloat16[4,4] -> bfloat16[4,4]" for _ in OPS),
        index=cols[4],
    )
    return p.GraphSchedule(
        hash=GRAPH_HASH,
        name=GRAPH_NAME,
        compute_seconds=COMPUTE_US * US,
        hbm_seconds=COMPUTE_US * US,
        busy=busy_seconds(),
        flops=4_000_000,
        hbm_read_bytes=6000,
        hbm_write_bytes=3000,
        captured_ops=8,
        ops=ops,
        collectives=(p.CollectiveCall(after_op=4, kind="all_reduce", bytes=CC_BYTES, group="dp", wait_op=wait_op),),
    )


def execution(
    slow: float, cc_us: float, *, step: int = 1, number: int = 1, start: float = START, exposed_us: float | None = None
) -> p.ProfiledExecution:
    device = (COMPUTE_US * slow + (cc_us if exposed_us is None else exposed_us)) * US
    collectives = (p.ExecutedCollective("all_reduce", CC_BYTES, 2, 1, 1, cc_us * US),) if cc_us else ()
    return p.ProfiledExecution(
        step=step,
        number=number,
        start=start,
        device_seconds=device,
        host_seconds=50 * US,
        outcome="completed",
        flops=4_000_000,
        engines={k: v * slow for k, v in busy_seconds().items()},
        collectives=collectives,
        hbm_in_use=1 << 30,
        slow_factor=slow,
    )


def write_process(
    root: Path,
    pid: int,
    rank: int,
    core: int,
    executions: list[p.ProfiledExecution],
    *,
    cc_seconds: float = 1e-4,
    peaks: bool = True,
    epoch: float = EPOCH,
    wait_op: int | None = None,
) -> Path:
    d = root / p.process_dir_name("i-0123456789abcdef0", pid)
    d.mkdir(parents=True)
    info = p.TraceInfo(
        instance_id="i-0123456789abcdef0",
        instance_type="trn1.32xlarge",
        pid=pid,
        hostname="emu",
        clock_monotonic=MONO,
        clock_epoch=epoch,
        device_profile="model",
        system_profile=True,
        ranks={str(core): rank},
        world_size=2,
        peak_flops=95e12 if peaks else 0.0,  # a NeuronCore-v2's TensorE BF16 peak (docs/hardware-catalog.md)
        hbm_bandwidth=410 * 2**30 if peaks else 0.0,
    )
    (d / p.TRACE_INFO).write_text(p.json_line(info))
    p.write_graph(d / p.neff_file(GRAPH_HASH), graph(wait_op))
    placement = p.CollectivePlacement(0, (0, 1), (0, 1), "neuronlink", "ring", 50e9, cc_seconds)
    header = p.DeviceProfileHeader(GRAPH_HASH, GRAPH_NAME, core, rank, 2, collectives=(placement,))
    lines = [p.json_line(header), *(p.json_line(e) for e in executions)]
    (d / p.ntff_file(GRAPH_HASH, core)).write_text("".join(lines))
    return d


def two_ranks(root: Path) -> Path:
    """The two-rank capture in ``root`` (the output directory)."""
    write_process(root, 100, 0, 0, [execution(1.0, 100)])
    write_process(root, 101, 1, 1, [execution(2.0, 400)])
    return root
