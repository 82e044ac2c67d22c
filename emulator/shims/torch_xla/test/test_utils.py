"""torch_xla.test.test_utils as neuron-emulator provides it (docs/run-your-script.md)."""

from emulator.compat.gaps import not_emulated
from emulator.compat.xla_utils import (
    close_summary_writer,
    get_summary_writer,
    now,
    print_test_update,
    print_training_update,
    write_to_summary,
)

__all__ = [
    "close_summary_writer",
    "get_summary_writer",
    "now",
    "print_test_update",
    "print_training_update",
    "write_to_summary",
]
__getattr__ = not_emulated(__name__)
