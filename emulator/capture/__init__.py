"""Capture of the ATen ops a training step runs on the emulated device."""
