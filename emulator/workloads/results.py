"""What a training run produced: the device's word on each step, the step figures, the run's
header and result. Torch-free, so that what only reads results (the summary text of
``summary.py``, the progress reporters, tests) does not pay for importing torch; the training loop
that fills them is ``runner.py``."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class StepInfo:
    """What the emulated device says about the last step; ``None`` fields are not reported."""

    device_seconds: float | None = None
    wall_seconds: float | None = None
    flops: int | None = None
    compiled: bool | None = None
    outcome: str | None = None

    @classmethod
    def from_xla(cls, info: Any) -> StepInfo:
        def field(name: str) -> Any:
            return getattr(info, name, None)

        flops = field("flops")
        device = field("device_seconds")
        wall = field("wall_seconds")
        compiled = field("compiled")
        outcome = field("outcome")
        return cls(
            device_seconds=None if device is None else float(device),
            wall_seconds=None if wall is None else float(wall),
            flops=None if flops is None else int(flops),
            compiled=None if compiled is None else bool(compiled),
            outcome=None if outcome is None else str(outcome),
        )


@dataclass(frozen=True)
class StepStats:
    step: int
    loss: float | None  # None for model-scale workloads (meta tensors hold no values)
    wall_seconds: float  # this host's wall time for the whole step
    samples: int  # samples processed by all ranks in this step
    device: StepInfo | None = None  # what the emulated device reported, if anything

    @property
    def device_seconds(self) -> float | None:
        return self.device.device_seconds if self.device else None

    @property
    def compiled(self) -> bool | None:
        return self.device.compiled if self.device else None


@dataclass(frozen=True)
class RunHeader:
    workload: str
    kind: str
    parameters: int
    steps: int
    batch_size: int
    seq_len: int | None
    dtype: str
    lr: float
    world_size: int
    neuroncores: tuple[int, ...]
    sample_unit: str


@dataclass
class RunResult:
    header: RunHeader
    steps: list[StepStats] = field(default_factory=list)
    wall_seconds: float = 0.0
    hbm_peak: dict[int, int] | None = None
    hbm_reason: str = ""

    @property
    def losses(self) -> list[float]:
        return [s.loss for s in self.steps if s.loss is not None]

    @property
    def first_loss(self) -> float | None:
        return self.losses[0] if self.losses else None

    @property
    def final_loss(self) -> float | None:
        return self.losses[-1] if self.losses else None
