"""What a training run is asked to do: a workload and its flags over the workload's defaults.
Torch-free, so that ``neuron-emulator run`` checks its flags (``cli.py``) before importing torch."""

from __future__ import annotations

from dataclasses import dataclass

from emulator.workloads import WorkloadSpec


@dataclass(frozen=True)
class RunConfig:
    spec: WorkloadSpec
    steps: int
    batch_size: int
    seq_len: int | None
    dtype: str
    lr: float
    seed: int = 0

    @classmethod
    def defaults(cls, spec: WorkloadSpec, **overrides: object) -> RunConfig:
        values: dict[str, object] = {
            "steps": spec.steps,
            "batch_size": spec.batch_size,
            "seq_len": spec.seq_len,
            "dtype": spec.dtype,
            "lr": spec.lr,
        }
        values.update({k: v for k, v in overrides.items() if v is not None})
        return cls(spec=spec, **values)  # type: ignore[arg-type]  # overrides are untyped keyword values
