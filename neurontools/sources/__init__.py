"""Where the tools get their data: the emulator daemon today, a neuron-monitor stream later."""
