"""Re-fit the emulator's fitted constants on the published calibration rows and print them next
to the values in the code (docs/parallel.md §Host share and calibration): the host share on the
BERT row, then each SDK era's compiler efficiency on that era's own rows.

    .venv/bin/python benchmarks/calibrate.py      # about three minutes
"""

from __future__ import annotations

from emulator.costmodel.sdk import ERAS
from emulator.hardware import get_instance_type
from emulator.parallel.calibrate import Row, fit_era
from emulator.parallel.host import HOST_SECONDS_PER_DEVICE_OP
from emulator.parallel.published import PUBLISHED_ROWS
from emulator.parallel.runner import plan_request


def main() -> None:
    instance = get_instance_type("trn1.32xlarge")
    host = HOST_SECONDS_PER_DEVICE_OP
    for era in ERAS:
        rows = []
        for published in PUBLISHED_ROWS:
            if published.name in era.fitted_on and published.published_seq_per_s:
                plan = plan_request(published.request, instance, env={})
                rows.append(Row(published.name, plan, published.published_seq_per_s))
        result = fit_era(era.release, rows, host_row=rows[0] if era is ERAS[0] else None, host_per_op=host)
        if era is ERAS[0]:
            host = result.host_seconds_per_op
            in_code = HOST_SECONDS_PER_DEVICE_OP * 1e6
            print(
                f"HOST_SECONDS_PER_DEVICE_OP fitted {host * 1e6:.2f} us, in code {in_code:.2f} us"
                f" (BERT utilisation {result.host_utilization:.1%})"
            )
        print(f"SDK {era.release:<5} efficiency fitted {result.efficiency:.4f}, in code {era.efficiency}")
        for name, ratio in result.ratios.items():
            print(f"    {name:<40} {ratio:.3f}x published")


if __name__ == "__main__":
    main()
