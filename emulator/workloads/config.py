"""What a training run is asked to do: a workload and its flags over the workload's defaults.
Torch-free, so that ``neuron-emulator run`` checks its flags (``cli.py``) before importing torch."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from emulator.workloads import WorkloadSpec

# what a workload defaults (WorkloadSpec), a run's flags override (RunConfig) and a result's
# header repeats (RunHeader): one name in all three
SETTINGS = ("steps", "batch_size", "seq_len", "dtype", "lr")


@dataclass(frozen=True)
class RunConfig:
    spec: WorkloadSpec
    steps: int
    batch_size: int
    seq_len: int | None
    dtype: str
    lr: float
    seed: int = 0

    def settings(self) -> dict[str, Any]:
        """The SETTINGS of this run (RunHeader's fields of the same names)."""
        return {name: getattr(self, name) for name in SETTINGS}

    @classmethod
    def defaults(cls, spec: WorkloadSpec, **overrides: object) -> RunConfig:
        values: dict[str, object] = {name: getattr(spec, name) for name in SETTINGS}
        values.update({k: v for k, v in overrides.items() if v is not None})
        return cls(spec=spec, **values)  # type: ignore[arg-type]  # overrides are untyped keyword values
