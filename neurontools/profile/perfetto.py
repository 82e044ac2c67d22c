"""The timeline as Perfetto's native protobuf trace (``.pftrace``, docs/profiling.md §Viewing):
a ``Trace`` of ``TracePacket``s, first a ``TrackDescriptor`` per process, row and counter, then
the ``TrackEvent``s (slice begin and end, instants, counter values, flows). Times are ns since
the epoch on the trace's default clock. Field numbers are those of Perfetto's protos
(``protos/perfetto/trace/trace_packet.proto`` and ``track_event/*.proto``)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from neurontools.profile import protobuf as pb
from neurontools.profile.build import Timeline
from neurontools.profile.chrome import OP_LEVEL_NOTE, hta_name
from neurontools.profile.clock import Clock
from neurontools.profile.timeline import ExecutionLayout
from neurontools.profile.tracks import OP, Counter, Slice, TrackId

DEFAULT_FILE = "ntff.pftrace"
SEQUENCE_ID = 1  # one writer: every packet on one trusted sequence

# Trace / TracePacket
TRACE_PACKET = 1
PACKET_TIMESTAMP, PACKET_TRACK_EVENT, PACKET_TRACK_DESCRIPTOR, PACKET_SEQUENCE_ID = 8, 11, 60, 10
# TrackDescriptor
TD_UUID, TD_PARENT, TD_NAME, TD_PROCESS, TD_THREAD, TD_COUNTER, TD_DESCRIPTION = 1, 5, 2, 3, 4, 8, 14
PROCESS_PID, PROCESS_NAME = 1, 6
THREAD_PID, THREAD_TID, THREAD_NAME = 1, 2, 5
COUNTER_UNIT, COUNTER_UNIT_NAME = 3, 6
UNIT_COUNT, UNIT_SIZE_BYTES = 2, 3
# TrackEvent
TE_TYPE, TE_TRACK, TE_NAME, TE_CATEGORIES, TE_DEBUG, TE_DOUBLE_VALUE = 9, 11, 23, 22, 4, 44
TE_FLOW_IDS, TE_TERMINATING_FLOW_IDS = 47, 48
SLICE_BEGIN, SLICE_END, INSTANT, COUNTER = 1, 2, 3, 4
# DebugAnnotation
DA_NAME, DA_BOOL, DA_INT, DA_DOUBLE, DA_STRING = 10, 2, 4, 5, 6


TIMESTAMP_KEY, PACKET_KEY = pb.key(PACKET_TIMESTAMP, pb.VARINT), pb.key(TRACE_PACKET, pb.LENGTH)
SEQUENCE = pb.uint(PACKET_SEQUENCE_ID, SEQUENCE_ID)  # every packet's trusted sequence field
_Timed = tuple[int, int, int, bytes]  # ns, 0 for an end / 1 for a begin, tie-break, the packet
# a timestamp of the 2020s in ns since the epoch is a 9-byte varint: from 2**56 (1972) to 2**63
NINE_BYTES = (1 << 56, 1 << 63)


def _head(rest: bytes) -> bytes:
    """A packet's bytes before its 9-byte timestamp varint, given the fields after it."""
    return PACKET_KEY + pb.varint(len(TIMESTAMP_KEY) + 9 + len(rest)) + TIMESTAMP_KEY


@dataclass(frozen=True)
class _OpTemplates:
    """The packets of one shape's ops on one core but their timestamps (what differs by execution)."""

    begins: list[bytes]  # per op, the begin packet's fields after the timestamp
    ends: list[bytes]
    begin_heads: list[bytes]  # per op, the begin packet's bytes before the timestamp (:func:`_head`)
    end_heads: list[bytes]
    order: list[tuple[int, bool]]  # (op, begin?) in time order


def _timed(ts: int, rest: bytes) -> bytes:
    """A packet of timestamp ``ts``, given the fields after it (:data:`SEQUENCE` and the body)."""
    inner = TIMESTAMP_KEY + pb.varint(ts) + rest
    return PACKET_KEY + pb.varint(len(inner)) + inner


def _packet(ts: int | None, body: bytes) -> bytes:
    if ts is None:
        return pb.message(TRACE_PACKET, [SEQUENCE, body])
    return _timed(ts, SEQUENCE + body)


def _annotation(name: str, value: Any) -> bytes:
    if isinstance(value, bool):
        field = pb.uint(DA_BOOL, value)
    elif isinstance(value, int):
        field = pb.uint(DA_INT, value)
    elif isinstance(value, float):
        field = pb.double(DA_DOUBLE, value)
    else:
        field = pb.string(DA_STRING, value if isinstance(value, str) else repr(value))
    return pb.message(TE_DEBUG, [pb.string(DA_NAME, name), field])


class _Writer:
    def __init__(self, timeline: Timeline) -> None:
        self.timeline = timeline
        self.clock = Clock(timeline.capture)
        self.uuids: dict[TrackId, int] = {}
        self.next_uuid = 1
        self.annotations: dict[tuple[str, type, Any], bytes] = {}
        # a graph's op has the same name, category and arguments in every execution on every rank:
        # their bytes are encoded once
        self.ops: dict[tuple[str, int], bytes] = {}  # (graph hash, op) -> its name, category and arguments
        self.templates: dict[tuple[int, int, int, int], _OpTemplates] = {}

    def described(self, s: Slice) -> bytes:
        """The slice's name, category and arguments, encoded."""
        fields = [pb.string(TE_NAME, hta_name(s)), pb.string(TE_CATEGORIES, s.kind)]
        return b"".join(fields + [self.annotation(k, v) for k, v in s.args.items()])

    def annotation(self, name: str, value: Any) -> bytes:
        """:func:`_annotation`, encoded once per name and value (a collective's replica group,
        link, ... repeat in every step)."""
        key = (name, type(value), tuple(value) if isinstance(value, list) else value)
        try:
            found = self.annotations.get(key)
        except TypeError:  # a value that cannot be a key
            return _annotation(name, value)
        if found is None:
            found = self.annotations[key] = _annotation(name, value)
        return found

    def ns(self, pid: int, t: float) -> int:
        return round(self.clock.epoch(pid, t) * 1e9)

    def uuid(self, track: TrackId) -> int:
        if track not in self.uuids:
            self.uuids[track] = self.next_uuid
            self.next_uuid += 1
        return self.uuids[track]

    def descriptors(self) -> Iterator[bytes]:
        for process in self.timeline.capture.processes:
            pid = process.info.pid
            name = f"{process.info.instance_id} pid {pid} rank {sorted(set(process.info.ranks.values()))}"
            proc = pb.message(TD_PROCESS, [pb.uint(PROCESS_PID, pid), pb.string(PROCESS_NAME, name)])
            body = [pb.uint(TD_UUID, self.uuid(TrackId(pid, None, ""))), proc, pb.string(TD_DESCRIPTION, OP_LEVEL_NOTE)]
            yield _packet(None, pb.message(PACKET_TRACK_DESCRIPTOR, body))
        counters = {c.track: c for c in self.timeline.counters}
        for tid, track in enumerate(self.timeline.tracks(), 1):
            yield _packet(None, pb.message(PACKET_TRACK_DESCRIPTOR, self._row(track, tid, counters.get(track))))

    def _row(self, track: TrackId, tid: int, counter: Counter | None) -> list[bytes]:
        fields = [pb.uint(TD_UUID, self.uuid(track)), pb.uint(TD_PARENT, self.uuid(TrackId(track.pid, None, "")))]
        fields.append(pb.string(TD_NAME, track.label))
        if counter is not None:
            unit = pb.uint(COUNTER_UNIT, UNIT_SIZE_BYTES if counter.unit == "bytes" else UNIT_COUNT)
            fields.append(pb.message(TD_COUNTER, [unit, pb.string(COUNTER_UNIT_NAME, counter.unit)]))
        else:
            thread = [pb.uint(THREAD_PID, track.pid), pb.uint(THREAD_TID, tid), pb.string(THREAD_NAME, track.label)]
            fields.append(pb.message(TD_THREAD, thread))
        return fields

    def slice_packets(self, s: Slice, flows_out: list[int], flows_in: list[int]) -> Iterator[_Timed]:
        pid, track = s.track.pid, pb.uint(TE_TRACK, self.uuid(s.track))
        begin = [pb.uint(TE_TYPE, INSTANT if s.start == s.end else SLICE_BEGIN), track, self.described(s)]
        begin += [pb.fixed64(TE_FLOW_IDS, f) for f in flows_out]
        begin += [pb.fixed64(TE_TERMINATING_FLOW_IDS, f) for f in flows_in]
        start, end = self.ns(pid, s.start), self.ns(pid, s.end)
        yield (start, 1, -end, _packet(start, pb.message(PACKET_TRACK_EVENT, begin)))
        if s.start != s.end:
            yield (end, 0, -start, _packet(end, pb.message(PACKET_TRACK_EVENT, [pb.uint(TE_TYPE, SLICE_END), track])))

    def op_packets(self, lay: ExecutionLayout, out: list[_Timed]) -> None:
        """The begin and end packets of the execution's op slices (what :meth:`slice_packets`
        writes for each, from bytes made once per shape and core: only the times differ)."""
        key = (id(lay.shape), lay.ref.pid, lay.ref.core, lay.lane_base)
        if key not in self.templates:
            self.templates[key] = self._op_templates(lay)
        t = self.templates[key]
        offset = self.clock.offsets.get(lay.ref.pid, 0.0)
        starts, stops = lay.op_times()
        ns0 = [round((x + offset) * 1e9) for x in starts]  # ns(), inlined
        ns1 = [round((x + offset) * 1e9) for x in stops]
        add, varint = out.append, pb.varint
        fast = ns0 and NINE_BYTES[0] <= min(ns0) and max(ns1) < NINE_BYTES[1]  # the heads fit
        for k, begin in t.order:  # in time order (nearly: the sort that follows is then quick)
            if starts[k] == stops[k]:  # an instant, as slice_packets writes it
                if begin:
                    out.extend(self.slice_packets(lay.op_slice(k, starts[k], stops[k]), [], []))
            elif begin:
                ns = ns0[k]
                add((ns, 1, -ns1[k], t.begin_heads[k] + varint(ns) + t.begins[k] if fast else _timed(ns, t.begins[k])))
            else:
                ns = ns1[k]
                add((ns, 0, -ns0[k], t.end_heads[k] + varint(ns) + t.ends[k] if fast else _timed(ns, t.ends[k])))

    def _op_templates(self, lay: ExecutionLayout) -> _OpTemplates:
        """Per op, its begin and end packets' fields after the timestamp; the order of the events."""
        begins, ends = [], []
        for k in range(len(lay.shape)):
            track = pb.uint(TE_TRACK, self.uuid(lay.op_track(k)))
            described = self.op_described(lay, k)
            begin = [pb.uint(TE_TYPE, SLICE_BEGIN), track, described]
            begins.append(SEQUENCE + pb.message(PACKET_TRACK_EVENT, begin))
            ends.append(SEQUENCE + pb.message(PACKET_TRACK_EVENT, [pb.uint(TE_TYPE, SLICE_END), track]))
        rel0, rel1 = lay.shape.relative
        events = [(rel0[k], 1, -rel1[k], k) for k in range(len(rel0))]
        events += [(rel1[k], 0, -rel0[k], k) for k in range(len(rel0))]
        order = [(k, flag == 1) for _, flag, _, k in sorted(events)]
        return _OpTemplates(begins, ends, [_head(b) for b in begins], [_head(e) for e in ends], order)

    def op_described(self, lay: ExecutionLayout, k: int) -> bytes:
        """:meth:`described` of op ``k`` of the execution's graph (the same on every core)."""
        key = (lay.graph.hash, k)
        if key not in self.ops:
            row = TrackId(lay.ref.pid, lay.ref.core, lay.shape.rows[k])
            self.ops[key] = self.described(Slice(row, lay.graph.ops.name[k], 0.0, 1.0, OP, lay.op_args(k)))
        return self.ops[key]

    def counter_packets(self, c: Counter) -> Iterator[bytes]:
        track = pb.uint(TE_TRACK, self.uuid(c.track))
        for t, value in c.points:
            body = [pb.uint(TE_TYPE, COUNTER), track, pb.double(TE_DOUBLE_VALUE, value)]
            yield _packet(self.ns(c.track.pid, t), pb.message(PACKET_TRACK_EVENT, body))

    def packets(self) -> Iterator[bytes]:
        yield from self.descriptors()
        outgoing: dict[int, list[int]] = {}
        incoming: dict[int, list[int]] = {}
        for f in self.timeline.flows:
            outgoing.setdefault(id(f.source), []).append(f.id)
            incoming.setdefault(id(f.target), []).append(f.id)
        timed = [
            event
            for s in self.timeline.others
            for event in self.slice_packets(s, outgoing.get(id(s), []), incoming.get(id(s), []))
        ]
        # each core's executions in time order: their events come nearly sorted, which the sort uses
        for lay in sorted(self.timeline.executions, key=lambda e: (e.ref.pid, e.ref.core, e.start)):
            self.op_packets(lay, timed)
        timed.sort()  # at one instant: ends first, then the longest slice begins (then by bytes)
        yield from (packet for *_, packet in timed)
        for c in self.timeline.counters:
            yield from self.counter_packets(c)


def encode(timeline: Timeline) -> bytes:
    """The ``.pftrace`` bytes of ``timeline``."""
    return b"".join(_Writer(timeline).packets())


def write(timeline: Timeline, output: str | None) -> list[Path]:
    path = Path(output or DEFAULT_FILE)
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb", buffering=1 << 20) as out:
        out.writelines(_Writer(timeline).packets())
    tmp.replace(path)
    return [path]
