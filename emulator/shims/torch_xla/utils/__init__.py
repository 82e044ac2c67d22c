"""torch_xla.utils as neuron-emulator provides it (docs/run-your-script.md)."""
