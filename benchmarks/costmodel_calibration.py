"""Cost model vs the published figures (docs/reference/trn1-runtime.md §Published training rows, §nccom-test points).

    .venv/bin/python benchmarks/costmodel_calibration.py

Nothing is tuned to these figures; the sensitivity rows show how far the answer moves when one
modelling choice is swapped for its alternative.
"""

from __future__ import annotations

import dataclasses

from emulator.costmodel import compile_cost, cost_group_collective, options_from_env
from emulator.costmodel.calibration import BERT_LARGE_PH1, CALIBRATION_ROWS, CalibrationRow, micro_step_ops, model_row
from emulator.costmodel.dtypes import CostOptions
from emulator.costmodel.graph import GraphCost
from emulator.hardware import NCCOM_CALIBRATION, NEURONCORE_V2, TRN1_32XLARGE

BERT_FP32_PUBLISHED = 1864  # BERT-L Ph1 FP32, 1 node (docs/reference/trn1-runtime.md §Published training rows)


def _lower_bound(graph: GraphCost) -> float:
    """Perfect overlap: the busiest engine (VectorE and GpSimd share SBUF access) or HBM."""
    b = graph.busy
    return max(b["tensor"], b["vector"] + b["gpsimd"], b["scalar"], b["dma"], graph.hbm_seconds)


def _serial(graph: GraphCost) -> float:
    return graph.serial_seconds


def rows() -> None:
    print("== training rows (one trn1.32xlarge, 32 NeuronCores) ==")
    header = f"{'row':18} {'published':>10} {'modelled':>10} {'ratio':>6} {'MFU':>6}  step breakdown"
    print(header)
    for row in CALIBRATION_ROWS:
        options = options_from_env(dict(row.env))
        r = model_row(row, options)
        m = r.micro
        print(
            f"{row.config.name:18} {row.published_seq_per_s:>10.1f} {r.modelled_seq_per_s:>10.1f} {r.ratio:>6.2f} "
            f"{r.mfu:>6.1%}  micro-step {m.device_seconds * 1e3:.1f} ms (x{row.grad_accum}), "
            f"TP collectives {r.tp_collective_seconds * 1e3:.1f} ms/micro, optimizer "
            f"{r.optimizer.device_seconds * 1e3:.1f} ms, DP all-reduce {r.dp_allreduce_seconds * 1e3:.1f} ms"
        )
        busy = ", ".join(f"{e} {s * 1e3:.1f}" for e, s in m.busy.items())
        print(
            f"{'':18} micro-step busy ms: {busy}; HBM floor {m.hbm_seconds * 1e3:.1f}; "
            f"no-overlap sum {m.serial_seconds * 1e3:.1f}; {m.flops / 1e12:.2f} TFLOP, {m.device_op_count} device ops"
        )


def sensitivity(row: CalibrationRow) -> None:
    options = options_from_env(dict(row.env))
    peak_dma = dataclasses.replace(
        NEURONCORE_V2, dma=dataclasses.replace(NEURONCORE_V2.dma, engine_practical=NEURONCORE_V2.dma.engine_peak)
    )
    variants = {
        "model": model_row(row, options),
        "perfect overlap (max busy, HBM)": model_row(row, options, device_time=_lower_bound),
        "no overlap (sum of op times)": model_row(row, options, device_time=_serial),
        "DMA at 27 GB/s peak per engine": model_row(row, options, core=peak_dma),
    }
    for name, r in variants.items():
        print(f"  {row.config.name:18} {name:34} {r.modelled_seq_per_s:>9.1f} seq/s  ratio {r.ratio:.2f}")


def precision() -> None:
    print("== BERT-Large Ph1 by precision (published: BF16+SR 2,846; 'FP32' 1,864 seq/s) ==")
    for label, options in (
        ("FP32, auto-cast none", CostOptions("none")),
        ("FP32, auto-cast matmult (SDK 2.3 default)", CostOptions("matmult")),
        ("BF16 + SR (XLA_USE_BF16=1)", options_from_env({"XLA_USE_BF16": "1"})),
    ):
        r = model_row(BERT_LARGE_PH1, options)
        print(f"  {label:42} {r.modelled_seq_per_s:>8.0f} seq/s")
    print(f"  published ratio BF16/FP32 {2846 / BERT_FP32_PUBLISHED:.2f}")


def collectives() -> None:
    print("== nccom-test (A21) vs model ==")
    for series in NCCOM_CALIBRATION:
        for size, us in series.points:
            cores = range(series.ranks)  # the first cores, node after node
            model = cost_group_collective(series.collective, size, cores, TRN1_32XLARGE).seconds * 1e6
            flag = "" if size >= 1 << 20 else "  (<1 MiB, not required)"
            print(f"  {series.name:40} {size:>11} B  {us:>8.0f} us  model {model:>8.0f} us  x{model / us:.2f}{flag}")


def compile_times() -> None:
    print("== simulated compile (assumed constants, see emulator/costmodel/compile.py) ==")
    for row in CALIBRATION_ROWS:
        c = compile_cost(micro_step_ops(row.config).ops)
        neff = c.model_code_bytes / 2**20
        print(f"  {row.config.name:18} {c.device_ops} device ops: {c.seconds:.1f} s, NEFF {neff:.1f} MiB")


def main() -> None:
    rows()
    print("== sensitivity to modelling choices ==")
    for row in CALIBRATION_ROWS:
        sensitivity(row)
    precision()
    collectives()
    compile_times()


if __name__ == "__main__":
    main()
