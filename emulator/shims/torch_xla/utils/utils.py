"""torch_xla.utils.utils as neuron-emulator provides it (docs/run-your-script.md)."""

from emulator.compat.gaps import not_emulated
from emulator.compat.xla_utils import SampleGenerator, as_list, getenv_as

__all__ = ["SampleGenerator", "as_list", "getenv_as"]
__getattr__ = not_emulated(__name__)
