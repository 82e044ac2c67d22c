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

import itertools
import json
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from neurontools.profile.build import Timeline
from neurontools.profile.clock import Clock
from neurontools.profile.load import ProcessCapture
from neurontools.profile.timeline import ExecutionLayout
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
    TrackId,
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
        firsts = [(s.track.pid, s.start) for s in timeline.others]
        firsts += [(lay.ref.pid, lay.extent()[0]) for lay in timeline.executions]
        earliest = min((self.clock.epoch(pid, t) for pid, t in firsts), default=0.0)
        self.base_ns = self.clock.base_ns(earliest)
        tracks = [t for t in timeline.tracks() if t.pid in pids]
        self.tids = {t: n for n, t in enumerate(tracks, 1)}
        self.correlations = {lay.ref: n for n, lay in enumerate(timeline.executions, 1)}
        self.ops = _OpEvents(self)

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
        dur = round(self.us(pid, s.end) - ts, 3)
        return {
            "ph": "X",
            "cat": category(s),
            "name": hta_name(s),
            "pid": pid,
            "tid": tid,
            "ts": ts,
            "dur": dur,
            "args": args,
        }

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

    def events(self) -> Iterator[str]:
        """Every event as JSON text: metadata, each row's slices (rows in order, slices by start,
        the longest first), flows, counters."""
        dumps = json.dumps
        yield from map(dumps, self.metadata())
        others: dict[TrackId, list[Slice]] = {}
        for s in self.timeline.others:
            if s.track.pid in self.pids:
                others.setdefault(s.track, []).append(s)
        for track in self.tids:
            if track in others:
                yield from (dumps(self.slice_event(s)) for s in sorted(others[track], key=_order))
            else:
                yield from self.ops.of_row(track)
        for f in self.timeline.flows:
            if f.source.track.pid in self.pids and f.target.track.pid in self.pids:
                yield from map(dumps, self.flow_events(f))
        for c in self.timeline.counters:
            if c.track.pid in self.pids:
                yield from map(dumps, self.counter_events(c))


class _OpEvents:
    """The op slices' events, row by row, as the text :meth:`_Writer.slice_event` gives for each,
    from pieces made once per shape and core (only the times and the correlation differ). Op rows
    hold nothing else (:func:`neurontools.profile.tracks.engine_track`)."""

    def __init__(self, writer: _Writer) -> None:
        self.writer = writer
        self.by_core: dict[tuple[int, int], list[ExecutionLayout]] = {}
        for lay in sorted(writer.timeline.executions, key=lambda e: e.start):
            if lay.op_count:
                self.by_core.setdefault((lay.ref.pid, lay.ref.core), []).append(lay)
        # (shape, pid, core, lane base) -> per op
        self.pieces: dict[tuple[int, int, int, int], list[tuple[str, str, str]]] = {}
        self.rows: dict[int, dict[tuple[str, int], list[int]]] = {}  # shape -> (row, lane) -> ops in order
        self.args: dict[tuple[str, int], str] = {}  # (graph hash, op) -> its arguments, without the closing }

    def of_row(self, track: TrackId) -> Iterator[str]:
        if track.core is None:
            return
        writer = self.writer
        offset = writer.clock.offsets.get(track.pid, 0.0)
        base_us = writer.base_ns / 1e3
        for lay in self.by_core.get((track.pid, track.core), []):
            ops = self._rows(lay).get((track.name, track.lane - lay.lane_base))
            if not ops:
                continue
            pieces = self._pieces(lay)
            correlation = writer.correlations[lay.ref]
            starts, ends = lay.op_times()
            for k in ops:
                t0, t1 = starts[k], ends[k]
                if t0 == t1:  # an instant
                    yield json.dumps(writer.slice_event(lay.op_slice(k, t0, t1)))
                    continue
                ts = round((t0 + offset) * 1e6 - base_us, 3)  # _Writer.us and slice_event's dur, inlined
                dur = round(round((t1 + offset) * 1e6 - base_us, 3) - ts, 3)
                head, middle, tail = pieces[k]
                yield f'{head}{ts!r}, "dur": {dur!r}{middle}{correlation}{tail}'

    def _rows(self, lay: ExecutionLayout) -> dict[tuple[str, int], list[int]]:
        """The shape's ops by row and lane, each row's by start, the longest first."""
        key = id(lay.shape)
        if key not in self.rows:
            starts, ends = lay.shape.relative
            rows: dict[tuple[str, int], list[int]] = {}
            for k in sorted(range(len(starts)), key=lambda k: (starts[k], -ends[k])):
                rows.setdefault((lay.shape.rows[k], lay.shape.lanes[k]), []).append(k)
            self.rows[key] = rows
        return self.rows[key]

    def _pieces(self, lay: ExecutionLayout) -> list[tuple[str, str, str]]:
        """Per op, its event's text before ``ts``, from ``args`` to the correlation, and after it."""
        key = (id(lay.shape), lay.ref.pid, lay.ref.core, lay.lane_base)  # the rows' tids differ by lane
        if key not in self.pieces:
            pid, tids = lay.ref.pid, self.writer.tids
            out = []
            for k in range(len(lay.shape)):
                track = lay.op_track(k)
                s = Slice(track, lay.graph.ops.name[k], 0.0, 1.0, OP)
                head = json.dumps({"ph": "X", "cat": category(s), "name": hta_name(s), "pid": pid, "tid": tids[track]})
                middle = f', "args": {self._args(lay, k)}, "correlation": '
                tail = f', "device": {lay.ref.core}, "stream": {tids[track]}}}}}'
                out.append((head[:-1] + ', "ts": ', middle, tail))
            self.pieces[key] = out
        return self.pieces[key]

    def _args(self, lay: ExecutionLayout, k: int) -> str:
        key = (lay.graph.hash, k)
        if key not in self.args:
            self.args[key] = json.dumps(lay.op_args(k))[:-1]
        return self.args[key]


def category(s: Slice) -> str:
    """The slice's Kineto category (``cat``)."""
    return "gpu_memcpy" if s.track.name == DMA_QUEUE else _CATEGORIES.get(s.kind, s.kind)


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
    head, events = _document(timeline, processes)
    return {**head, "traceEvents": [json.loads(e) for e in events]}


def _document(timeline: Timeline, processes: list[ProcessCapture] | None) -> tuple[dict[str, Any], Iterator[str]]:
    """The document of ``processes`` but its events; the events as JSON text."""
    chosen = list(timeline.capture.processes) if processes is None else processes
    writer = _Writer(timeline, {p.info.pid for p in chosen})
    cores = sorted({lay.ref.core for lay in timeline.executions if lay.ref.pid in writer.pids})
    first = chosen[0] if chosen else None
    head = {
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
    }
    return head, writer.events()


def write(timeline: Timeline, output: str | None) -> list[Path]:
    """Write the trace: to ``output`` (default :data:`DEFAULT_FILE`), or, when ``output`` is a
    directory, one ``rank-<N>.pt.trace.json`` per process in it (HTA's layout). Returns the files."""
    target = Path(output or DEFAULT_FILE)
    if output and (target.is_dir() or output.endswith("/")):
        target.mkdir(parents=True, exist_ok=True)
        paths = []
        for n, process in enumerate(timeline.capture.processes):
            path = target / f"rank-{_rank(process, n)}{SUFFIX}"
            _dump(*_document(timeline, [process]), path)
            paths.append(path)
        return paths
    _dump(*_document(timeline, None), target)
    return [target]


CHUNK = 10_000  # events joined per write


def _dump(head: dict[str, Any], events: Iterator[str], path: Path) -> None:
    r"""The document as ``json.dumps`` writes it (": " after keys: HTA finds the rank with
    r'"rank":\s+(\d+)'), its events streamed in chunks."""
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w", encoding="utf-8") as out:
        out.write(json.dumps(head)[:-1] + ', "traceEvents": [')
        separator = ""
        while chunk := list(itertools.islice(events, CHUNK)):
            out.write(separator + ", ".join(chunk))
            separator = ", "
        out.write("]}")
    tmp.replace(path)
