"""Interval arithmetic on ``(start, end)`` pairs in seconds: unions and coverage."""

from __future__ import annotations

from collections.abc import Iterable


def union(intervals: Iterable[tuple[float, float]]) -> list[tuple[float, float]]:
    """The disjoint, sorted intervals covering the same time as ``intervals`` (empty ones dropped)."""
    merged: list[tuple[float, float]] = []
    for start, end in sorted(i for i in intervals if i[1] > i[0]):
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], end))
        else:
            merged.append((start, end))
    return merged


def length(intervals: Iterable[tuple[float, float]]) -> float:
    """Seconds covered by at least one of ``intervals``."""
    return sum(end - start for start, end in union(intervals))


def covered(intervals: Iterable[tuple[float, float]], low: float, high: float) -> float:
    """Seconds of ``[low, high)`` covered by at least one of ``intervals``."""
    return length((max(s, low), min(e, high)) for s, e in intervals if e > low and s < high)


def binned(intervals: Iterable[tuple[float, float]], low: float, width: float, bins: int) -> list[float]:
    """Seconds of each of ``bins`` consecutive windows ``[low + k*width, low + (k+1)*width)`` covered
    by at least one of ``intervals`` (one sweep: what :func:`covered` gives window by window)."""
    out = [0.0] * bins
    high = low + width * bins
    for start, end in union(intervals):
        start, end = max(start, low), min(end, high)
        k = min(bins - 1, int((start - low) // width)) if end > start else bins
        while start < end and k < bins:
            edge = end if k == bins - 1 else min(end, low + (k + 1) * width)
            out[k] += edge - start
            start, k = edge, k + 1
    return out
