"""Number formats of neuron-top (docs/reference/neuron-top.md §Number formats); ``None`` (no data) prints ``NA``.

Shares (0-1) are given as shares and shown as percent: the screen is where percent belongs.
"""

from __future__ import annotations

from neurontools.contract.percent import percent

NA = "NA"
_UNITS = ("B", "KB", "MB", "GB", "TB")


def fmt_bytes(value: float | None) -> str:
    """One decimal and a binary unit: ``0.0B``, ``34.0KB``, ``888.4MB``, ``20.2GB``."""
    if value is None:
        return NA
    amount = float(value)
    unit = _UNITS[0]
    for unit in _UNITS:
        if abs(amount) < 1024 or unit == _UNITS[-1]:
            break
        amount /= 1024
    return f"{amount:.1f}{unit}"


def fmt_percent_cell(share: float | None) -> str:
    """Grid cell label: ``[69.89%]``, ``[ 0.00%]``; 8 columns for shares below 1."""
    return f"[{percent(share):5.2f}%]" if share is not None else f"[{NA:>6}]"


def fmt_tflops_cell(flops: float | None) -> str:
    """FLOPS-mode cell label: ``[ 10.004TF]`` (teraflops, 3 decimals, right-aligned)."""
    return f"[{flops / 1e12:7.3f}TF]" if flops is not None else f"[{NA:>9}]"


def fmt_cpu_pair(user: float | None, system: float | None) -> str:
    """vCPU label ``[ 2.69%, 3.97%]`` = ``[user%, system%]`` of the (user, system) shares."""
    if user is None or system is None:
        return f"[{NA:>6},{NA:>6}]"
    return f"[{percent(user):5.2f}%,{percent(system):5.2f}%]"


def fmt_avg_percent(share: float | None) -> str:
    return f"Avg: {percent(share):.2f}%" if share is not None else f"Avg: {NA}"


def fmt_avg_total_tflops(avg: float | None, total: float | None) -> str:
    """``Avg:    9.946TF | Total:  318.278TF``."""

    def tf(v: float | None) -> str:
        return f"{v / 1e12:8.3f}TF" if v is not None else f"{NA:>8}"

    return f"Avg: {tf(avg)} | Total: {tf(total)}"


def fmt_percent(share: float | None, width: int = 6) -> str:
    """A share as a plain percentage with 2 decimals (engine view): ``45.12%``."""
    return f"{percent(share):{width - 1}.2f}%" if share is not None else f"{NA:>{width}}"


def fmt_rate(value: float | None) -> str:
    return f"{value:.2f}" if value is not None else NA


def fmt_count(value: int | None) -> str:
    return str(value) if value is not None else NA


def fmt_core_list(cores: tuple[int, ...] | None) -> str:
    """NeuronCore ids as ranges: ``0-1``, ``0,4-7``; ``NA`` when unknown."""
    if cores is None:
        return NA
    if not cores:
        return "-"
    ordered = sorted(set(cores))
    parts: list[str] = []
    start = prev = ordered[0]
    for core in ordered[1:]:
        if core == prev + 1:
            prev = core
            continue
        parts.append(f"{start}-{prev}" if prev > start else str(start))
        start = prev = core
    parts.append(f"{start}-{prev}" if prev > start else str(start))
    return ",".join(parts)


def device_label(index: int) -> str:
    """Tree device label ``ND%2d``: ``ND 0``, ``ND 9``, ``ND10``."""
    return f"ND{index:2d}"


def core_label(index: int) -> str:
    return f"NC{index:2d}"
