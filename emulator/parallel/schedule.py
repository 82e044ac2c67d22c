"""The timeline of one optimizer step on every pipeline stage: micro-batches, bubble, host gaps.

Each stage runs its graphs one after another on its NeuronCores. Before every execution the host
needs ``host_seconds`` (tracing the step, launching the NEFF, moving inputs: see
``emulator/parallel/host.py``); a graph whose input comes from another stage also waits for that
stage's send. With one stage the step is ``micro_step``, then ``grad_accum - 1`` times
``micro_step_accumulate``, then ``optimizer``. With pipeline stages each micro-batch is a
``forward`` and a ``backward`` graph, ordered by the schedule:

- ``gpipe``: all forwards, then all backwards (every micro-batch's activations held at once);
- ``1f1b`` (PipeDream-flush, Megatron's default): stage ``s`` of ``p`` runs ``min(p - s - 1, m)``
  warm-up forwards, then alternates one forward and one backward, then drains the backwards; it
  holds at most ``p - s`` micro-batches' activations.

Forward ``i`` on stage ``s`` starts when stage ``s - 1`` finished forward ``i`` and sent its
activation; backward ``i`` when stage ``s + 1`` finished backward ``i`` and sent the gradient back.
The idle time this leaves at the start and end of a step is the pipeline bubble. The optimizer
graph follows the last backward; the step ends when every stage has finished it (the
data-parallel reduction and the global gradient norm synchronise the stages).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass


@dataclass(frozen=True)
class GraphTime:
    """What one execution of a graph costs on a core of its stage."""

    compute_seconds: float  # the cost model's time of the graph's ops
    collective_seconds: float  # its collectives, each in full (run by the CC-cores inside the NEFF)
    host_seconds: float  # host time before it can start (tracing, launch, input transfer)
    exposed_seconds: float | None = None  # what of them no op hides (None: all of it)

    @property
    def exposed(self) -> float:
        return self.collective_seconds if self.exposed_seconds is None else self.exposed_seconds

    @property
    def device_seconds(self) -> float:
        return self.compute_seconds + self.exposed


@dataclass(frozen=True)
class Slot:
    graph: str  # name of the traced graph
    micro_batch: int  # -1 for the optimizer
    start: float  # seconds after the step started
    end: float


@dataclass(frozen=True)
class StageTimeline:
    stage: int
    slots: tuple[Slot, ...]
    max_in_flight: int  # micro-batches whose activations are held at once

    @property
    def end(self) -> float:
        return self.slots[-1].end if self.slots else 0.0


@dataclass(frozen=True)
class StepTimeline:
    stages: tuple[StageTimeline, ...]
    step_seconds: float

    def busy_seconds(self, stage: int) -> float:
        return sum(s.end - s.start for s in self.stages[stage].slots)

    def bubble(self, stage: int) -> float:
        """Share of the step the stage's cores wait for other stages (not for the host)."""
        return 0.0 if self.step_seconds <= 0 else 1.0 - self.busy_seconds(stage) / self.step_seconds


def order(schedule: str, stage: int, stages: int, micro_batches: int) -> list[tuple[str, int]]:
    """The (``F``/``B``, micro-batch) sequence a stage runs in one step."""
    m = micro_batches
    if schedule == "gpipe":
        return [("F", i) for i in range(m)] + [("B", i) for i in range(m)]
    if schedule != "1f1b":
        raise ValueError(f"unknown pipeline schedule {schedule!r} (1f1b or gpipe)")
    warmup = min(stages - stage - 1, m)
    seq = [("F", i) for i in range(warmup)]
    f, b = warmup, 0
    while f < m:
        seq.append(("F", f))
        seq.append(("B", b))
        f, b = f + 1, b + 1
    seq += [("B", i) for i in range(b, m)]
    return seq


def _max_in_flight(seq: list[tuple[str, int]]) -> int:
    held = peak = 0
    for kind, _ in seq:
        held += 1 if kind == "F" else -1
        peak = max(peak, held)
    return peak


def step_timeline(
    times: Mapping[int, Mapping[str, GraphTime]],
    *,
    stages: int,
    micro_batches: int,
    schedule: str = "1f1b",
    send_seconds: Callable[[int], float] = lambda stage: 0.0,
    first_step: bool = False,
) -> StepTimeline:
    """Simulate one optimizer step. ``times[stage][graph]`` are the stage's graph costs;
    ``send_seconds(s)`` the point-to-point time between stage ``s`` and ``s + 1``; with
    ``first_step`` the optimizer graph is ``optimizer_first`` (it also creates the state)."""
    optimizer = "optimizer_first" if first_step else "optimizer"
    if stages == 1:
        return _one_stage(times[0], micro_batches, optimizer)

    seqs = [order(schedule, s, stages, micro_batches) for s in range(stages)]
    pos = [0] * stages
    free = [0.0] * stages
    done: dict[tuple[str, int, int], float] = {}  # (F/B, stage, micro-batch) -> end
    slots: list[list[Slot]] = [[] for _ in range(stages)]
    remaining = sum(len(q) for q in seqs)
    while remaining:
        progressed = False
        for s in range(stages):
            if pos[s] >= len(seqs[s]):
                continue
            kind, i = seqs[s][pos[s]]
            graph, dep = _ready(kind, s, i, stages, done, send_seconds)
            if dep is None:
                continue  # waits for another stage
            t = times[s][graph]
            start = max(free[s] + t.host_seconds, dep)
            end = start + t.device_seconds
            done[(kind, s, i)] = end
            free[s] = end
            slots[s].append(Slot(graph, i, start, end))
            pos[s] += 1
            remaining -= 1
            progressed = True
        if not progressed:
            raise RuntimeError("pipeline schedule deadlocked")  # a bug in order(): never expected
    timelines = []
    for s in range(stages):
        t = times[s][optimizer]
        start = free[s] + t.host_seconds
        slots[s].append(Slot(optimizer, -1, start, start + t.device_seconds))
        timelines.append(StageTimeline(s, tuple(slots[s]), _max_in_flight(seqs[s])))
    return StepTimeline(tuple(timelines), max(tl.end for tl in timelines))


def _one_stage(graphs: Mapping[str, GraphTime], micro_batches: int, optimizer: str) -> StepTimeline:
    """No pipeline: the micro-steps one after the other, then the optimizer graph."""
    now = 0.0
    row: list[Slot] = []
    for i in range(micro_batches):
        graph = "micro_step" if i == 0 else "micro_step_accumulate"
        start = now + graphs[graph].host_seconds
        now = start + graphs[graph].device_seconds
        row.append(Slot(graph, i, start, now))
    start = now + graphs[optimizer].host_seconds
    row.append(Slot(optimizer, -1, start, start + graphs[optimizer].device_seconds))
    timeline = StageTimeline(0, tuple(row), 1)
    return StepTimeline((timeline,), timeline.end)


def _ready(
    kind: str,
    s: int,
    i: int,
    stages: int,
    done: Mapping[tuple[str, int, int], float],
    send_seconds: Callable[[int], float],
) -> tuple[str, float | None]:
    """The graph of pass ``kind`` (F/B) of micro-batch ``i`` on stage ``s`` and when its input is
    there: the previous stage's forward plus the send, the next stage's backward plus the send
    (the last stage's backward follows its own forward); None while that has not run."""
    if kind == "F":
        dep = 0.0 if s == 0 else done.get(("F", s - 1, i))
        return "forward", dep if dep is None or s == 0 else dep + send_seconds(s - 1)
    dep = done.get(("F", s, i)) if s == stages - 1 else done.get(("B", s + 1, i))
    graph = "backward" if i == 0 else "backward_accumulate"
    return graph, dep if dep is None or s == stages - 1 else dep + send_seconds(s)
