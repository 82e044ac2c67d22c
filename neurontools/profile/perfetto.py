"""The timeline as Perfetto's native protobuf trace (``.pftrace``, docs/profiling.md §Viewing):
a ``Trace`` of ``TracePacket``s, first a ``TrackDescriptor`` per process, row and counter, then
the ``TrackEvent``s (slice begin and end, instants, counter values, flows). Times are ns since
the epoch on the trace's default clock. Field numbers are those of Perfetto's protos
(``protos/perfetto/trace/trace_packet.proto`` and ``track_event/*.proto``)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

from neurontools.profile import protobuf as pb
from neurontools.profile.build import Timeline
from neurontools.profile.chrome import OP_LEVEL_NOTE, hta_name
from neurontools.profile.clock import Clock
from neurontools.profile.tracks import Counter, Slice, TrackId

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


_Timed = tuple[int, int, int, bytes]  # ns, 0 for an end / 1 for a begin, tie-break, the packet


def _packet(ts: int | None, body: bytes) -> bytes:
    fields = [pb.uint(PACKET_SEQUENCE_ID, SEQUENCE_ID), body]
    if ts is not None:
        fields.insert(0, pb.uint(PACKET_TIMESTAMP, ts))
    return pb.message(TRACE_PACKET, fields)


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
        # a graph's op has the same name, category and arguments in every execution on every rank:
        # their bytes are encoded once
        self.encoded: dict[tuple, bytes] = {}

    def described(self, s: Slice) -> bytes:
        """The slice's name, category and arguments, encoded."""
        try:
            key = (s.name, s.kind, s.track.name, *s.args.items())
            found = self.encoded.get(key)
        except TypeError:  # an argument that cannot be a key (a list): encoded every time
            key, found = None, None
        if found is None:
            fields = [pb.string(TE_NAME, hta_name(s)), pb.string(TE_CATEGORIES, s.kind)]
            found = b"".join(fields + [_annotation(k, v) for k, v in s.args.items()])
            if key is not None:
                self.encoded[key] = found
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
            for s in self.timeline.slices
            for event in self.slice_packets(s, outgoing.get(id(s), []), incoming.get(id(s), []))
        ]
        timed.sort(key=lambda e: e[:3])  # at one instant: ends first, then the longest slice begins
        yield from (packet for *_, packet in timed)
        for c in self.timeline.counters:
            yield from self.counter_packets(c)


def encode(timeline: Timeline) -> bytes:
    """The ``.pftrace`` bytes of ``timeline``."""
    return b"".join(_Writer(timeline).packets())


def write(timeline: Timeline, output: str | None) -> list[Path]:
    path = Path(output or DEFAULT_FILE)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(encode(timeline))
    tmp.replace(path)
    return [path]
