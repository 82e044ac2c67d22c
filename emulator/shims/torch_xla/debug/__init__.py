"""torch_xla.debug as neuron-emulator provides it (docs/run-your-script.md)."""
