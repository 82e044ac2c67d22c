"""torch_xla.debug.metrics as neuron-emulator provides it (docs/run-your-script.md)."""

from emulator.compat.gaps import not_emulated
from emulator.compat.metrics import counter_names, counter_value, metric_names, metrics_report, short_metrics_report

__all__ = ["counter_names", "counter_value", "metric_names", "metrics_report", "short_metrics_report"]
__getattr__ = not_emulated(__name__)
