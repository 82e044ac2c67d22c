"""Turns a source's reads into the ``Sample`` stream the screen shows (runs in a worker thread).

Adds the utilization history and a sequence number; while the source is unreachable the last
sample's layout is kept with every value unknown and the reason as ``error``, so tabs and the
grid stay in place and come back with data when the source answers again.
"""

from __future__ import annotations

from dataclasses import replace

from neurontools.top.history import UtilizationHistory
from neurontools.top.model import Sample
from neurontools.top.sources import SampleSource, SourceEnded, SourceUnavailable


class Sampler:
    def __init__(self, source: SampleSource, tools_version: str) -> None:
        self.source = source
        self.history = UtilizationHistory()
        self.last = Sample(tools_version=tools_version)
        self.ended = False

    @property
    def paced(self) -> bool:
        return self.source.paced

    def next(self) -> Sample | None:
        """The sample to show now; None when nothing changed."""
        if self.ended:
            return None
        try:
            sample = self.source.read()
        except SourceUnavailable as exc:
            self.last = replace(self.last.unreachable(str(exc)), history=self.history.record_gap())
            return self.last
        except SourceEnded as exc:
            self.ended = True
            self.last = replace(self.last, error=str(exc))
            return self.last
        if sample is None:
            return None
        self.last = replace(sample, history=self.history.record(sample), sequence=self.last.sequence + 1)
        return self.last

    def close(self) -> None:
        self.source.close()
