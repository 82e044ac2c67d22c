"""neurontools: open re-implementations of the AWS Neuron device tools (neuron-ls, ...)."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("neurontools")
except PackageNotFoundError:  # running from a source tree that was not installed
    __version__ = "0.0.0"
