"""Parallel training on the emulated instance: plan, tensor-parallel layers, tracing, schedules."""
