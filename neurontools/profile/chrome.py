"""The timeline as Chrome trace-event JSON the way PyTorch's profiler (Kineto) writes it
(docs/profiling.md §Viewing), for chrome://tracing, ui.perfetto.dev, TensorBoard and Holistic
Trace Analysis (HTA).

* top level: ``schemaVersion``, ``deviceProperties`` (one per NeuronCore), ``distributedInfo``
  (``backend``, ``rank``, ``world_size``) first, so HTA's rank scan finds it before any event
  argument; ``baseTimeNanoseconds``: every ``ts`` is µs after it (Kineto's convention), with ns
  precision;
* one process per OS process (``pid``), one thread per row; device rows carry ``args.stream``
  (HTA's mark of a device kernel) and ``args.correlation`` (the execution; its ``nrt_execute``
  host slice has the same one, as a CUDA launch and its kernel do);
* HTA sorts kernels by name: collectives are named ``ncclKernel_<kind>`` (communication), the DMA
  queue's and the HBM rows' slices ``dma:<name>`` (memory), every other device slice is compute.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from neurontools.profile.build import Timeline
from neurontools.profile.clock import Clock
from neurontools.profile.load import ProcessCapture
from neurontools.profile.tracks import (
    COLLECTIVE,
    DMA_QUEUE,
    HBM_TAIL,
    HBM_TRACK,
    HOST,
    OP,
    STEP,
    Counter,
    Flow,
    Slice,
)

SUFFIX = ".pt.trace.json"
DEFAULT_FILE = "neuron_profile" + SUFFIX
HTA_MEMORY = "dma:"  # HTA's memory kernels match ^dma
HTA_COMMUNICATION = "ncclKernel_"  # HTA's communication kernels match ^nccl.*Kernel
BACKEND = "xla"  # torch-neuronx's process-group backend
OP_LEVEL_NOTE = "device rows are per framework op (the emulator's cost model), not per instruction"
_CATEGORIES = {
    OP: "kernel",
    COLLECTIVE: "kernel",
    HBM_TAIL: "gpu_memcpy",
    HOST: "cuda_runtime",
    STEP: "user_annotation",
}


def hta_name(s: Slice) -> str:
    """The slice's name as HTA classifies it (see the module docstring)."""
    if s.kind == COLLECTIVE:
        return HTA_COMMUNICATION + s.name
    if s.track.name in (DMA_QUEUE, HBM_TRACK) and not s.name.startswith(HTA_MEMORY):
        return HTA_MEMORY + s.name
    return s.name


class _Writer:
    """Events of some processes of a timeline, with their rows numbered."""

    def __init__(self, timeline: Timeline, pids: set[int]) -> None:
        self.timeline = timeline
        self.pids = pids
        self.clock = Clock(timeline.capture)
        earliest = min((self.clock.epoch(s.track.pid, s.start) for s in timeline.slices), default=0.0)
        self.base_ns = self.clock.base_ns(earliest)
        tracks = [t for t in timeline.tracks() if t.pid in pids]
        self.tids = {t: n for n, t in enumerate(tracks, 1)}
        self.correlations = {lay.ref: n for n, lay in enumerate(timeline.executions, 1)}

    def us(self, pid: int, t: float) -> float:
        return round(self.clock.epoch(pid, t) * 1e6 - self.base_ns / 1e3, 3)

    def metadata(self) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        for n, process in enumerate(p for p in self.timeline.capture.processes if p.info.pid in self.pids):
            pid = process.info.pid
            out.append(_meta("process_name", pid, 0, name=_process_label(process)))
            out.append(_meta("process_sort_index", pid, 0, sort_index=n))
            out.append(_meta("process_labels", pid, 0, labels=OP_LEVEL_NOTE))
        for track, tid in self.tids.items():
            out.append(_meta("thread_name", track.pid, tid, name=track.label))
            out.append(_meta("thread_sort_index", track.pid, tid, sort_index=tid))
        return out

    def slice_event(self, s: Slice) -> dict[str, Any]:
        pid, tid = s.track.pid, self.tids[s.track]
        ts = self.us(pid, s.start)
        args = dict(s.args)
        if s.ref is not None:
            args["correlation"] = self.correlations[s.ref]
            if s.kind != HOST:
                args.update(device=s.track.core, stream=tid)
        if s.start == s.end:
            return {"ph": "i", "s": "t", "cat": s.kind, "name": s.name, "pid": pid, "tid": tid, "ts": ts, "args": args}
        cat = _CATEGORIES.get(s.kind, s.kind)
        if s.track.name == DMA_QUEUE:
            cat = "gpu_memcpy"
        dur = round(self.us(pid, s.end) - ts, 3)
        return {"ph": "X", "cat": cat, "name": hta_name(s), "pid": pid, "tid": tid, "ts": ts, "dur": dur, "args": args}

    def flow_events(self, f: Flow) -> list[dict[str, Any]]:
        out = []
        for ph, s, t in (("s", f.source, f.source.start), ("f", f.target, f.target.start)):
            event = {"ph": ph, "id": f.id, "pid": s.track.pid, "tid": self.tids[s.track], "ts": self.us(s.track.pid, t)}
            event.update(cat="collective", name=f.name)
            if ph == "f":
                event["bp"] = "e"
            out.append(event)
        return out

    def counter_events(self, c: Counter) -> Iterable[dict[str, Any]]:
        name = c.track.label
        for t, value in c.points:
            yield {"ph": "C", "name": name, "pid": c.track.pid, "ts": self.us(c.track.pid, t), "args": {c.unit: value}}

    def events(self) -> list[dict[str, Any]]:
        out = self.metadata()
        slices = sorted((s for s in self.timeline.slices if s.track.pid in self.pids), key=_order)
        out.extend(self.slice_event(s) for s in slices)
        for f in self.timeline.flows:
            if f.source.track.pid in self.pids and f.target.track.pid in self.pids:
                out.extend(self.flow_events(f))
        for c in self.timeline.counters:
            if c.track.pid in self.pids:
                out.extend(self.counter_events(c))
        return out


def _order(s: Slice) -> tuple[tuple[int, int, str, int], float, float]:
    return (s.track.key, s.start, -s.end)


def _meta(event: str, pid: int, tid: int, **args: Any) -> dict[str, Any]:
    return {"ph": "M", "name": event, "pid": pid, "tid": tid, "args": args}


def _process_label(process: ProcessCapture) -> str:
    ranks = sorted(set(process.info.ranks.values()))
    who = f"rank {', '.join(map(str, ranks))}" if ranks else "process"
    return f"{who} (pid {process.info.pid}, {process.info.instance_id})"


def _rank(process: ProcessCapture, fallback: int) -> int:
    return min(process.info.ranks.values(), default=fallback)


def trace(timeline: Timeline, processes: list[ProcessCapture] | None = None) -> dict[str, Any]:
    """The trace document of ``processes`` (default: all, merged into one file)."""
    chosen = list(timeline.capture.processes) if processes is None else processes
    writer = _Writer(timeline, {p.info.pid for p in chosen})
    cores = sorted({lay.ref.core for lay in timeline.executions if lay.ref.pid in writer.pids})
    first = chosen[0] if chosen else None
    return {
        "schemaVersion": 1,
        "deviceProperties": [{"id": c, "name": f"NeuronCore-v2 {c} (emulated)"} for c in cores],
        "distributedInfo": {
            "backend": BACKEND,
            "rank": _rank(first, 0) if first else 0,
            "world_size": timeline.capture.world_size,
        },
        "baseTimeNanoseconds": writer.base_ns,
        "displayTimeUnit": "ms",
        "traceName": timeline.capture.source,
        "neuronProfile": {"op_level": all(p.info.op_level for p in chosen), "note": OP_LEVEL_NOTE},
        "traceEvents": writer.events(),
    }


def write(timeline: Timeline, output: str | None) -> list[Path]:
    """Write the trace: to ``output`` (default :data:`DEFAULT_FILE`), or, when ``output`` is a
    directory, one ``rank-<N>.pt.trace.json`` per process in it (HTA's layout). Returns the files."""
    target = Path(output or DEFAULT_FILE)
    if output and (target.is_dir() or output.endswith("/")):
        target.mkdir(parents=True, exist_ok=True)
        paths = []
        for n, process in enumerate(timeline.capture.processes):
            path = target / f"rank-{_rank(process, n)}{SUFFIX}"
            _dump(trace(timeline, [process]), path)
            paths.append(path)
        return paths
    _dump(trace(timeline), target)
    return [target]


def _dump(document: dict[str, Any], path: Path) -> None:
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w", encoding="utf-8") as out:
        # json.dumps in one piece runs CPython's C encoder (json.dump to a file is pure Python, ~5x
        # slower); ": " after keys: HTA finds the rank with r'"rank":\s+(\d+)'
        out.write(json.dumps(document))
    tmp.replace(path)
