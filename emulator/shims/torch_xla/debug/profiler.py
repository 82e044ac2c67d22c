"""torch_xla.debug.profiler as neuron-emulator provides it (docs/profiling.md, docs/run-your-script.md)."""

from emulator.compat.gaps import not_emulated
from emulator.compat.profiler import (
    ProfilerServer,
    StepTrace,
    Trace,
    get_tracer_marked_step,
    set_tracer_marked_step,
    start_server,
    start_trace,
    stop_trace,
    trace,
    trace_detached,
)

__all__ = [
    "ProfilerServer",
    "StepTrace",
    "Trace",
    "get_tracer_marked_step",
    "set_tracer_marked_step",
    "start_server",
    "start_trace",
    "stop_trace",
    "trace",
    "trace_detached",
]
__getattr__ = not_emulated(__name__)
