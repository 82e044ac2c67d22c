"""neuron-monitor configuration file (docs/reference/neuron-monitor.md §Configuration file).

Semantics chosen where the real tool is undocumented:

* ``period`` may be given at the root, on a ``neuron_runtimes[]`` entry and on a metric object;
  the most specific one wins (metric > runtime entry > root), default ``5s``. It is a Go duration
  string: a sequence of decimal numbers with units ``ns``, ``us`` (``µs``, ``μs``), ``ms``, ``s``,
  ``m``, ``h`` (``"1s"``, ``"500ms"``, ``"1m30s"``, ``"1.5h"``), optional leading ``+``. A bare
  number (``"5"``), an empty string, negative or zero durations and anything shorter than
  ``MIN_PERIOD`` (100 ms: one daemon snapshot per wake-up stays cheap) are rejected.
* ``tag_filter`` is a regular expression searched (unanchored, like Go's ``regexp.MatchString``)
  in each process's tag; absent means every process. It is compiled with Python's ``re``: the
  RE2 syntax the real tool accepts is a subset except for a few rarely used classes.
* A process is watched by the first ``neuron_runtimes`` entry whose filter matches it.
* Group types are checked against the application-level and system-level lists; the 1.x name
  ``inference_stats`` is rejected with a pointer to ``execution_stats``; a group may appear once
  per list. Unknown keys, duplicate keys and non-JSON input are rejected.
* ``{"type": "k8s_info"}`` in ``system_metrics`` enables the report's ``neuron_k8s_info`` object
  (the real switch is undocumented; docs/kubernetes.md §The switch).

Every problem raises ``ConfigError`` whose message is one line naming the place, e.g.
``neuron_runtimes[0].metrics[2].type: unknown metric group "foo" (expected one of ...)``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from neurontools.contract.json_values import json_type_name
from neurontools.contract.schema import APP_GROUPS, RENAMED_GROUPS, SYSTEM_METRIC_TYPES
from neurontools.report.monitor_config import (
    DEFAULT_PERIOD,
    MATCH_ALL,
    GroupKey,
    MetricGroup,
    MonitorConfig,
    RuntimeSelector,
    default_config,
)

MIN_PERIOD = 0.1

__all__ = [  # the model lives in report.monitor_config; this module reads files into it
    "ConfigError",
    "GroupKey",
    "MetricGroup",
    "MonitorConfig",
    "RuntimeSelector",
    "default_config",
    "load_config",
    "parse_config",
    "parse_duration",
]


class ConfigError(ValueError):
    """The configuration is invalid; the message is one line naming the problem and where."""


# -- Go durations ---------------------------------------------------------------------------------

_UNITS_NS = {"ns": 1, "us": 1_000, "µs": 1_000, "μs": 1_000, "ms": 1_000_000, "s": 10**9, "m": 60 * 10**9}
_UNITS_NS["h"] = 3600 * 10**9
_DURATION_PART = re.compile(r"(\d*)(?:\.(\d*))?([^\d.]*)")
_MAX_NS = 2**63 - 1


def parse_duration(text: str) -> float:
    """A Go duration string (``time.ParseDuration`` grammar) in seconds; ``ValueError`` if malformed.

    Unlike Go, a bare ``"0"`` is not accepted: every number needs a unit.
    """
    quoted = _json_value(text)
    rest = text
    negative = False
    if rest and rest[0] in "+-":
        negative = rest[0] == "-"
        rest = rest[1:]
    if not rest:
        raise ValueError(f"invalid duration {quoted}")
    total_ns = 0
    while rest:
        match = _DURATION_PART.match(rest)
        assert match is not None  # the pattern matches the empty string
        whole, frac, unit = match.group(1), match.group(2), match.group(3)
        if not whole and not frac:
            raise ValueError(f"invalid duration {quoted}")
        if not unit:
            raise ValueError(f'invalid duration {quoted}: missing unit (use e.g. "5s", "500ms", "1m30s")')
        if unit not in _UNITS_NS:
            raise ValueError(f"invalid duration {quoted}: unknown unit {_json_value(unit)}")
        if len(whole.lstrip("0")) > 19:  # more than any duration holds (and than int() takes)
            raise ValueError(f"invalid duration {quoted}: out of range")
        scale = _UNITS_NS[unit]
        ns = int(whole or "0") * scale
        frac = (frac or "")[:20]  # digits past the 20th change less than a nanosecond
        if frac:
            ns += int(frac) * scale // 10 ** len(frac)
        total_ns += ns
        if total_ns > _MAX_NS:
            raise ValueError(f"invalid duration {quoted}: out of range")
        rest = rest[match.end() :]
    seconds = total_ns / 1e9
    return -seconds if negative else seconds


def format_duration(seconds: float) -> str:
    """Short human form of a period for messages: ``5s``, ``500ms``, ``1m30s``."""
    ms = round(seconds * 1000)
    if ms % 1000:
        return f"{ms}ms" if ms < 1000 else f"{ms / 1000:g}s"
    s = ms // 1000
    if s < 60:
        return f"{s}s"
    h, rem = divmod(s, 3600)
    m, s = divmod(rem, 60)
    return (f"{h}h" if h else "") + (f"{m}m" if m else "") + (f"{s}s" if s else "")


# -- parsing --------------------------------------------------------------------------------------


# characters that end a line for some readers although JSON leaves them as they are
_LINE_BREAKS = str.maketrans({"\x85": "\\u0085", "\u2028": "\\u2028", "\u2029": "\\u2029"})
_SHOWN_CHARS = 120


def _json_value(value: Any) -> str:
    """``value`` as JSON for a one-line message: control characters escaped, cut when long."""
    try:
        text = json.dumps(value, ensure_ascii=False).translate(_LINE_BREAKS)
    except (ValueError, RecursionError):
        text = type(value).__name__
    return text if len(text) <= _SHOWN_CHARS else text[:_SHOWN_CHARS] + "..."


def _check_keys(data: Mapping[str, Any], allowed: tuple[str, ...], where: str) -> None:
    for key in data:
        if key not in allowed:
            place = f"{where}: " if where else ""
            raise ConfigError(f"{place}unknown key {_json_value(key)} (allowed: {', '.join(allowed)})")


def _object(value: Any, where: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise ConfigError(f"{where}: expected an object, got {json_type_name(value)}")
    return value


def _array(value: Any, where: str) -> list[Any]:
    if not isinstance(value, list):
        raise ConfigError(f"{where}: expected an array, got {json_type_name(value)}")
    return value


def _period(data: Mapping[str, Any], where: str, inherited: float) -> float:
    if "period" not in data:
        return inherited
    where = f"{where}.period" if where else "period"
    value = data["period"]
    if not isinstance(value, str):
        raise ConfigError(f'{where}: expected a duration string such as "5s", got {_json_value(value)}')
    try:
        seconds = parse_duration(value)
    except ValueError as exc:
        raise ConfigError(f"{where}: {exc}") from None
    if seconds <= 0:
        raise ConfigError(f"{where}: duration {_json_value(value)} must be positive")
    if seconds < MIN_PERIOD:
        raise ConfigError(
            f"{where}: duration {_json_value(value)} is shorter than the minimum period {format_duration(MIN_PERIOD)}"
        )
    return seconds


def _group_type(value: Any, where: str, *, app: bool) -> str:
    own, other = (APP_GROUPS, SYSTEM_METRIC_TYPES) if app else (SYSTEM_METRIC_TYPES, APP_GROUPS)
    if not isinstance(value, str):
        raise ConfigError(f"{where}: expected a metric group name, got {_json_value(value)}")
    if value in RENAMED_GROUPS:
        new, since = RENAMED_GROUPS[value]
        raise ConfigError(f'{where}: metric group "{value}" was renamed to "{new}" in {since}')
    if value in other:
        if app:
            hint = 'a system-level group: list it under "system_metrics"'
        else:
            hint = 'an application-level group: list it under "neuron_runtimes[].metrics"'
        raise ConfigError(f'{where}: "{value}" is {hint}')
    if value not in own:
        raise ConfigError(f"{where}: unknown metric group {_json_value(value)} (expected one of {', '.join(own)})")
    return value


def _metrics(value: Any, where: str, inherited: float, *, app: bool, runtime: int | None) -> tuple[MetricGroup, ...]:
    groups: list[MetricGroup] = []
    seen: dict[str, int] = {}
    for i, item in enumerate(_array(value, where)):
        iwhere = f"{where}[{i}]"
        data = _object(item, iwhere)
        _check_keys(data, ("type", "period"), iwhere)
        if "type" not in data:
            raise ConfigError(f'{iwhere}: missing key "type"')
        group = _group_type(data["type"], f"{iwhere}.type", app=app)
        if group in seen:
            raise ConfigError(f'{iwhere}.type: metric group "{group}" already listed at {where}[{seen[group]}]')
        seen[group] = i
        groups.append(MetricGroup(group, _period(data, iwhere, inherited), runtime))
    return tuple(groups)


def _runtime_entry(value: Any, index: int, root_period: float) -> RuntimeSelector:
    where = f"neuron_runtimes[{index}]"
    data = _object(value, where)
    _check_keys(data, ("tag_filter", "period", "metrics"), where)
    tag_filter = data.get("tag_filter", MATCH_ALL)
    if not isinstance(tag_filter, str):
        raise ConfigError(f"{where}.tag_filter: expected a regular expression string, got {_json_value(tag_filter)}")
    try:
        pattern = re.compile(tag_filter)
    except re.error as exc:
        raise ConfigError(f"{where}.tag_filter: invalid regular expression {_json_value(tag_filter)}: {exc}") from None
    period = _period(data, where, root_period)
    metrics = _metrics(data.get("metrics", []), f"{where}.metrics", period, app=True, runtime=index)
    return RuntimeSelector(tag_filter=tag_filter, period=period, metrics=metrics, pattern=pattern)


def config_from_dict(data: Any) -> MonitorConfig:
    """Validate a decoded configuration object."""
    if not isinstance(data, Mapping):
        raise ConfigError(f"expected a JSON object at the top level, got {json_type_name(data)}")
    _check_keys(data, ("period", "neuron_runtimes", "system_metrics"), "")
    period = _period(data, "", DEFAULT_PERIOD)
    runtimes = _array(data.get("neuron_runtimes", []), "neuron_runtimes")
    return MonitorConfig(
        period=period,
        neuron_runtimes=tuple(_runtime_entry(entry, i, period) for i, entry in enumerate(runtimes)),
        system_metrics=_metrics(data.get("system_metrics", []), "system_metrics", period, app=False, runtime=None),
    )


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for key, value in pairs:
        if key in result:
            raise ConfigError(f"duplicate key {_json_value(key)}")
        result[key] = value
    return result


def parse_config(text: str) -> MonitorConfig:
    """Parse the text of a configuration file."""
    if not text.strip():
        raise ConfigError("not valid JSON: the file is empty")
    try:
        data = json.loads(text, object_pairs_hook=_no_duplicates)
    except json.JSONDecodeError as exc:
        raise ConfigError(f"not valid JSON: {exc.msg} (line {exc.lineno} column {exc.colno})") from None
    except ConfigError:
        raise
    except RecursionError:
        raise ConfigError("not valid JSON: nested too deeply") from None
    except ValueError:  # an integer literal longer than Python converts (4300 digits)
        raise ConfigError("not valid JSON: a number has too many digits") from None
    return config_from_dict(data)


def load_config(path: str | Path) -> MonitorConfig:
    """Read and parse a configuration file; errors are prefixed with the file name."""
    try:
        raw = Path(path).read_bytes()
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read the configuration file: {exc.strerror or exc}") from None
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise ConfigError(f"{path}: not valid JSON: the file is not UTF-8 text") from None
    try:
        return parse_config(text)
    except ConfigError as exc:
        raise ConfigError(f"{path}: {exc}") from None
