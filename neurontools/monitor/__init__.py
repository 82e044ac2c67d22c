"""neuron-monitor: collect Neuron metric groups and print neuron-monitor JSON reports."""
