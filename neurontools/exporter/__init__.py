"""Prometheus exporters: the official script's drop-in (compat) and neuron-exporter (extended)."""
