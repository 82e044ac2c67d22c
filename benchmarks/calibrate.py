"""Re-fit the emulator's two fitted constants on the two published calibration rows and print
them next to the values in the code (docs/parallel.md "Calibration").

    .venv/bin/python benchmarks/calibrate.py
"""

from __future__ import annotations

from emulator.costmodel.graph import COMPILER_EFFICIENCY
from emulator.hardware import get_instance_type
from emulator.parallel.calibrate import fit
from emulator.parallel.host import HOST_SECONDS_PER_DEVICE_OP
from emulator.parallel.published import PUBLISHED_ROWS
from emulator.parallel.runner import plan_request


def main() -> None:
    instance = get_instance_type("trn1.32xlarge")
    bert_row, gpt_row = PUBLISHED_ROWS[0], PUBLISHED_ROWS[1]
    bert = plan_request(bert_row.request, instance, env={})
    gpt = plan_request(gpt_row.request, instance, env={})
    assert bert_row.published_seq_per_s and gpt_row.published_seq_per_s
    result = fit(bert, bert_row.published_seq_per_s, gpt, gpt_row.published_seq_per_s)
    print(f"COMPILER_EFFICIENCY        fitted {result.efficiency:.4f}   in code {COMPILER_EFFICIENCY}")
    print(f"HOST_SECONDS_PER_DEVICE_OP fitted {result.host_seconds_per_op * 1e6:.2f} us in code "
          f"{HOST_SECONDS_PER_DEVICE_OP * 1e6:.2f} us")
    print(f"with the fit: {bert_row.name} {result.bert_ratio:.3f}x published "
          f"(utilization {result.bert_utilization:.1%}), {gpt_row.name} {result.gpt_ratio:.3f}x published")


if __name__ == "__main__":
    main()
