"""torch_xla.core as neuron-emulator provides it (docs/run-your-script.md)."""
