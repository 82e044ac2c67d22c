"""``neuron-profile``: read a capture, lay it out as a timeline, summarize it, write it for other
viewers (docs/profiling.md)."""
