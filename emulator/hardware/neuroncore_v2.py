"""NeuronCore-v2 and Trainium (Trn1) chip figures for the cost model.

Values and their sources are listed in docs/hardware-catalog.md (nccom-test points:
docs/reference/trn1-runtime.md §nccom-test points); where sources conflict, the value chosen in
docs/hardware-catalog.md §Conflicting figures is used and the alternatives are kept in ``note``.
Per-NC peak throughput is the chip value ÷ 2.
"""

from __future__ import annotations

from dataclasses import dataclass

from emulator.hardware.sourced import Sourced, cite

_DERIVED = "derived"


@dataclass(frozen=True)
class TensorEngineSpec:
    clock: Sourced
    array_rows: Sourced
    array_cols: Sourced
    peak_bf16: Sourced
    peak_fp16: Sourced
    peak_tf32: Sourced
    peak_cfp8: Sourced
    peak_fp32: Sourced
    peak_int8: Sourced
    peak_bf16_nki: Sourced  # 128 x 128 x 2 x 2.8 GHz, the array's arithmetic bound
    matmul_min_cycles: Sourced  # back-to-back matmul initiation interval floor
    fp32_cost_factor: Sourced  # FP32 inputs cost this many times a 16/8-bit matmul
    moving_free_max: Sourced  # MultiplyMoving free size limit per instruction
    psum_accumulation_groups: Sourced

    def peak(self, dtype: str) -> Sourced:
        """Peak of one NC's TensorE for an input dtype name (``bf16``, ``float16``, ``fp32``...)."""
        key = dtype.lower().removeprefix("torch.")
        attr = _DTYPE_PEAK.get(key)
        if attr is None:
            raise ValueError(f"no TensorE peak for dtype {dtype!r}; known: {', '.join(sorted(_DTYPE_PEAK))}")
        return getattr(self, attr)


_DTYPE_PEAK: dict[str, str] = {
    "bf16": "peak_bf16",
    "bfloat16": "peak_bf16",
    "fp16": "peak_fp16",
    "float16": "peak_fp16",
    "half": "peak_fp16",
    "tf32": "peak_tf32",
    "cfp8": "peak_cfp8",
    "fp8": "peak_cfp8",
    "float8_e4m3fn": "peak_cfp8",
    "float8_e5m2": "peak_cfp8",
    "fp32": "peak_fp32",
    "float32": "peak_fp32",
    "float": "peak_fp32",
    "int8": "peak_int8",
}


@dataclass(frozen=True)
class VectorEngineSpec:
    clock: Sourced
    elements_per_cycle: Sourced
    fp32_tflops: Sourced
    fixed_overhead_cycles: Sourced


@dataclass(frozen=True)
class ScalarEngineSpec:
    clock: Sourced
    elements_per_cycle: Sourced
    fp32_tflops: Sourced
    act_read_accumulator_cycles: Sourced


@dataclass(frozen=True)
class GpSimdEngineSpec:
    clock: Sourced
    processors: Sourced
    fp32_lanes: Sourced
    tcm_per_processor: Sourced


@dataclass(frozen=True)
class OnChipMemorySpec:
    """SBUF and PSUM of one NeuronCore and the cost of touching them."""

    sbuf: Sourced
    sbuf_partitions: Sourced
    psum: Sourced
    psum_banks: Sourced
    access_fixed_cycles: Sourced  # start overhead of every engine access to SBUF/PSUM
    port_clock: Sourced
    port_elements_per_cycle: Sourced


@dataclass(frozen=True)
class DmaSpec:
    engines_per_nc: Sourced
    queues_per_engine: Sourced
    engine_peak: Sourced
    engine_practical: Sourced
    fixed_cost: Sourced
    min_efficient_bytes_per_partition: Sourced


@dataclass(frozen=True)
class NeuronCoreV2Spec:
    tensor: TensorEngineSpec
    vector: VectorEngineSpec
    scalar: ScalarEngineSpec
    gpsimd: GpSimdEngineSpec
    on_chip: OnChipMemorySpec
    dma: DmaSpec
    hbm: Sourced
    hbm_bandwidth: Sourced
    model_code_overhead: Sourced  # micro-code counted in "model code" per physical NC


@dataclass(frozen=True)
class LinkSpec:
    """NeuronLink-v2 and collective latencies."""

    neuronlink_ports: Sourced
    neuronlink_per_chip: Sourced
    neuronlink_per_link: Sourced
    cc_cores: Sourced
    intra_node_hop_latency_low: Sourced
    intra_node_hop_latency_high: Sourced
    inter_node_hop_latency: Sourced


@dataclass(frozen=True)
class TrainiumChipSpec:
    name: str
    cores_per_chip: Sourced
    core: NeuronCoreV2Spec
    hbm: Sourced
    hbm_stacks: Sourced
    hbm_bandwidth: Sourced
    dma_engines: Sourced
    dma_bandwidth: Sourced
    host_link_bandwidth: Sourced
    links: LinkSpec


@dataclass(frozen=True)
class RuntimeSpec:
    exec_timeout: Sourced
    device_memory: Sourced  # the runtime's own device memory per NeuronCore


@dataclass(frozen=True)
class CollectiveCalibration:
    """One nccom-test series: message size in bytes -> time in microseconds."""

    name: str
    collective: str
    ranks: int
    nodes: int
    dtype: str
    points: tuple[tuple[int, float], ...]
    source: str
    note: str = ""

    def busbw_gib_s(self) -> tuple[float, ...]:
        """Bus bandwidth as nccom-test prints it (its "GB/s" column is GiB/s).

        all-reduce moves 2(n-1)/n of the buffer per rank, all-gather (n-1)/n.
        """
        n = self.ranks
        factor = 2 * (n - 1) / n if self.collective == "all-reduce" else (n - 1) / n
        return tuple(factor * size / (us * 1e-6) / 2**30 for size, us in self.points)


def _tensor() -> TensorEngineSpec:
    a1a2 = cite("A1", "A2")
    peak16_note = "chip 190 / 2; launch spec 105 (210/chip, until 2023-04-15); NKI-derived 91.75"
    return TensorEngineSpec(
        clock=Sourced(2.8, "GHz", cite("A4")),
        array_rows=Sourced(128, "count", cite("A4")),
        array_cols=Sourced(128, "count", cite("A4")),
        peak_bf16=Sourced(95, "TFLOPS", a1a2, peak16_note),
        peak_fp16=Sourced(95, "TFLOPS", a1a2, peak16_note),
        peak_tf32=Sourced(95, "TFLOPS", a1a2, peak16_note),
        peak_cfp8=Sourced(95, "TFLOPS", a1a2, "no extra FP8 rate on Trainium1 (A8 lists 191/chip); " + peak16_note),
        peak_fp32=Sourced(23.75, "TFLOPS", a1a2, "chip 47.5 / 2; launch 52.5/chip; NKI ~23 (1/4 rate)"),
        peak_int8=Sourced(190, "TOPS", a1a2, "chip 380 / 2; 420/chip until 2023-04-15; no compiler INT8 path"),
        peak_bf16_nki=Sourced(91.75, "TFLOPS", cite("A4"), f"{_DERIVED}: 128 x 128 x 2 x 2.8 GHz ('92 TF')"),
        matmul_min_cycles=Sourced(64, "cycles", cite("A4"), "initiation interval ~ max(N_free, 64) for 16/8-bit/TF32"),
        fp32_cost_factor=Sourced(4, "x", cite("A4"), "FP32 inputs ~4x the cost of BF16/FP16/TF32/cFP8"),
        moving_free_max=Sourced(512, "count", cite("A4"), "MultiplyMoving: <=128 partitions x <=512 free"),
        psum_accumulation_groups=Sourced(8, "count", cite("A4"), "8 PSUM banks -> up to 8 open accumulation groups"),
    )


def _core() -> NeuronCoreV2Spec:
    a4 = cite("A4")
    return NeuronCoreV2Spec(
        tensor=_tensor(),
        vector=VectorEngineSpec(
            clock=Sourced(1.12, "GHz", a4),
            elements_per_cycle=Sourced(128, "elements/cycle", a4, "one-input op ~N cycles, two-input ~2N"),
            fp32_tflops=Sourced(2.3, "TFLOPS", cite("A3"), "earlier '2,500 FLOP/cycle'; model by elements/cycle"),
            fixed_overhead_cycles=Sourced(100, "cycles", a4, "~100 cycles for tiny or serially dependent ops"),
        ),
        scalar=ScalarEngineSpec(
            clock=Sourced(1.4, "GHz", a4),
            elements_per_cycle=Sourced(128, "elements/cycle", a4, "one input tensor per instruction"),
            fp32_tflops=Sourced(2.9, "TFLOPS", cite("A3"), "earlier '1,600 FLOP/cycle'; model by elements/cycle"),
            act_read_accumulator_cycles=Sourced(64, "cycles", a4),
        ),
        gpsimd=GpSimdEngineSpec(
            clock=Sourced(1.4, "GHz", a4),
            processors=Sourced(8, "count", a4, "512-bit SIMD processors, 16 SBUF partitions each"),
            fp32_lanes=Sourced(128, "count", a4, "256 FP16, 512 INT8 lanes"),
            tcm_per_processor=Sourced(64, "KB", a4, "3-cycle latency"),
        ),
        on_chip=OnChipMemorySpec(
            sbuf=Sourced(24, "MiB", a4, "128 partitions x 192 KiB; A5 figure says '~25 MB'"),
            sbuf_partitions=Sourced(128, "count", a4),
            psum=Sourced(2, "MiB", a4, "128 partitions x 16 KiB"),
            psum_banks=Sourced(8, "count", a4, "8 banks x 2 KiB per partition"),
            access_fixed_cycles=Sourced(60, "cycles", a4, "fixed start overhead of every SBUF/PSUM access"),
            port_clock=Sourced(1.4, "GHz", a4),
            port_elements_per_cycle=Sourced(128, "elements/cycle", a4, "about half when innermost stride >16 B"),
        ),
        dma=DmaSpec(
            engines_per_nc=Sourced(16, "count", cite("A4", "A6")),
            queues_per_engine=Sourced(16, "count", cite("A6"), "round-robin between queues on NC-v2"),
            engine_peak=Sourced(
                27,
                "GB/s",
                cite("A4", "A6"),
                "conflict: A4 27 GiB/s, A6 27.2 GB/s, A7 17 B/ns (272 GB/s per NC); 27 GB/s peak chosen",
            ),
            engine_practical=Sourced(17, "GB/s", cite("A7"), "17 B/ns; the 'practical' figure"),
            fixed_cost=Sourced(1.3, "us", cite("A7"), "~1,300 ns cross-engine setup/semaphore latency per transfer"),
            min_efficient_bytes_per_partition=Sourced(
                2, "KiB", cite("A7"), "<256 B badly overhead-bound; >=4 KiB saturated"
            ),
        ),
        hbm=Sourced(16, "GiB", cite("A27", "A2"), "half of the chip's 32 GiB; OOM logs top out at ~15.9 GB/NC"),
        hbm_bandwidth=Sourced(410, "GiB/s", cite("A2"), f"{_DERIVED}: chip 820 / 2; A5 figure '~0.5 TB/s per NC'"),
        model_code_overhead=Sourced(96, "MB", cite("A18"), "~96 MB micro-code per physical NC (MB vs MiB unstated)"),
    )


TRAINIUM1 = TrainiumChipSpec(
    name="Trainium",
    cores_per_chip=Sourced(2, "count", cite("A2", "A4")),
    core=_core(),
    hbm=Sourced(32, "GiB", cite("A2", "A4"), "2 HBM stacks"),
    hbm_stacks=Sourced(2, "count", cite("A2")),
    hbm_bandwidth=Sourced(
        820,
        "GiB/s",
        cite("A1", "A2"),
        "A4 '820 GB/s', A8 '0.8 TB/s'; per instance 13,120 GiB/s (A1) vs 9.8 TB/s (S1); "
        "820 GiB/s per chip chosen",
    ),
    dma_engines=Sourced(32, "count", cite("A4"), "16 per NC"),
    dma_bandwidth=Sourced(1, "TB/s", cite("A2"), "'1 TB/s DMA bandwidth with inline compression'"),
    host_link_bandwidth=Sourced(16, "GB/s", cite("A5"), "memory-hierarchy figure: '~16 GB/s' host<->device"),
    links=LinkSpec(
        neuronlink_ports=Sourced(4, "count", cite("A4"), "Inferentia2 has 2"),
        neuronlink_per_chip=Sourced(
            384,
            "GB/s",
            cite("A1", "A8"),
            "trn1; A1 table says GiB/s; 1,536 between 2023-04-25 and 05-26; server diagram label '768 GB/sec'",
        ),
        neuronlink_per_link=Sourced(96, "GB/s", cite("A1", "A8"), f"{_DERIVED}: 384 GB/s / 4 links"),
        cc_cores=Sourced(6, "count", cite("A4", "A8"), "collective-communication cores per chip"),
        intra_node_hop_latency_low=Sourced(1, "us", cite("A20"), "~1-2 us per intra-node hop, HBM-load dependent"),
        intra_node_hop_latency_high=Sourced(2, "us", cite("A20"), "~1-2 us per intra-node hop, HBM-load dependent"),
        inter_node_hop_latency=Sourced(15, "us", cite("A20"), "~15 us per inter-node (EFA) hop"),
    ),
)

NEURONCORE_V2: NeuronCoreV2Spec = TRAINIUM1.core

RUNTIME = RuntimeSpec(
    exec_timeout=Sourced(30, "s", cite("A16"), "NEURON_RT_EXEC_TIMEOUT table default; prose says 2 s"),
    device_memory=Sourced(1088, "B", cite("I1"), "'runtime: 1.062KB' per core in the OOM report (1.062 x 1024)"),
)

_KIB, _MIB, _GIB = 2**10, 2**20, 2**30
_A21 = cite("A21")

ALLREDUCE_2RANK_FP32 = CollectiveCalibration(
    name="all-reduce 2 ranks fp32",
    collective="all-reduce",
    ranks=2,
    nodes=1,
    dtype="fp32",
    points=(
        (1 * _KIB, 58),
        (64 * _KIB, 58),
        (256 * _KIB, 60),
        (1 * _MIB, 68),
        (4 * _MIB, 107),
        (16 * _MIB, 332),
        (64 * _MIB, 1214),
        (256 * _MIB, 4750),
        (1 * _GIB, 18930),
    ),
    source=_A21,
    note="58 us floor from 1 KiB to 64 KiB; nccom-test, SDK ~2.10 (2023)",
)

ALLREDUCE_64RANK_FP32 = CollectiveCalibration(
    name="all-reduce 64 ranks (2 nodes, EFA) fp32",
    collective="all-reduce",
    ranks=64,
    nodes=2,
    dtype="fp32",
    points=(
        (8, 520),
        (1 * _KIB, 840),
        (64 * _KIB, 1315),
        (1 * _MIB, 1328),
        (4 * _MIB, 1378),
        (16 * _MIB, 2138),
        (64 * _MIB, 3963),
        (256 * _MIB, 11954),
        (512 * _MIB, 21803),
        (1 * _GIB, 41806),
    ),
    source=_A21,
    note="two trn1.32xlarge over EFA; nccom-test, SDK ~2.10 (2023)",
)

ALLREDUCE_2RANK_UINT8 = CollectiveCalibration(
    name="all-reduce 2 ranks uint8",
    collective="all-reduce",
    ranks=2,
    nodes=1,
    dtype="uint8",
    points=((32 * _MIB, 768),),
    source=_A21,
)

ALLGATHER_32RANK_FP32 = CollectiveCalibration(
    name="all-gather 32 ranks (1 node) fp32",
    collective="all-gather",
    ranks=32,
    nodes=1,
    dtype="fp32",
    points=((1 * _KIB, 151), (8 * _KIB, 149), (64 * _KIB, 150), (512 * _KIB, 179)),
    source=_A21,
)

NCCOM_CALIBRATION: tuple[CollectiveCalibration, ...] = (
    ALLREDUCE_2RANK_FP32,
    ALLREDUCE_64RANK_FP32,
    ALLREDUCE_2RANK_UINT8,
    ALLGATHER_32RANK_FP32,
)
