"""What the person at the keyboard chose to see (immutable; the app replaces it on each key)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class DisplayState:
    pid: int | None = None  # selected tab: None for "all", else the application's PID
    flops: bool = False  # f: TFLOPS instead of utilization percent
    engines: bool = False  # e: per-engine view instead of the core grid
    history: bool = False  # s: utilization sparklines instead of bars
    processes: bool = False  # p: process panel instead of the memory tree
