"""Neuron SDK releases as the emulator models them (docs/cost-model.md §SDK eras).

An *era* is a release whose published training rows the emulator is calibrated on; its one fitted
constant is the compiler efficiency of that release's neuronx-cc (``emulator/costmodel/graph.py``
divides every modelled graph time by it). Any release number maps to the newest era at or before
it. Separately, :data:`INTRODUCED` lists the release that introduced each training mechanism the
emulator models (from the SDK release notes): a release before it does not have the mechanism.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class SdkEra:
    release: str  # "2.18": the era starts at this release
    # Share of the modelled engine and DMA rates the release's compiled programs achieve: what the
    # per-op rules leave out (operand transposes and layout changes, instruction scheduling, fusion
    # across ops, the compiler's maturity). FITTED on ``fitted_on`` only, by
    # emulator/parallel/calibrate.py (benchmarks/calibrate.py prints the fit; a test checks it).
    efficiency: float
    fitted_on: tuple[str, ...]  # the calibration rows (emulator/parallel/published.py names)


ERAS: tuple[SdkEra, ...] = (
    SdkEra("2.3", 0.6057, ("BERT-Large Ph1 DP32 BF16+SR", "GPT3-6.7B TP8xDP4 BF16+SR")),
    SdkEra("2.18", 0.8547, ("GPT3-46B 32 nodes TP8xPP8 BF16+SR", "Llama2-13B 32 nodes TP8xPP4 FP32 opt")),
    SdkEra("2.21", 0.6891, ("Llama2-7B 16 nodes TP8 FP32 opt",)),
)
NEWEST = ERAS[-1].release  # the default release

# The release that introduced each mechanism for training (docs/cost-model.md §SDK eras, from the
# Neuron SDK release notes): ZeRO-1 (torch-neuronx ZeroRedundancyOptimizer) 2.12; sequence
# parallelism (neuronx-distributed 0.3.0, neuronx-nemo-megatron) and selective recomputation
# (neuronx-nemo-megatron) 2.13; the NKI flash-attention kernel for training 2.19.
INTRODUCED: dict[str, str] = {
    "zero1": "2.12",
    "sequence_parallel": "2.13",
    "selective_recompute": "2.13",
    "flash_attention": "2.19",
}
FEATURE_NAMES: dict[str, str] = {
    "zero1": "ZeRO-1",
    "sequence_parallel": "sequence parallelism",
    "selective_recompute": "selective recomputation",
    "flash_attention": "the flash-attention kernel",
}


def release_key(release: str) -> tuple[int, int]:
    """``"2.18"`` / ``"2.18.0"`` -> ``(2, 18)``; ValueError with one line if it is not a release."""
    parts = release.strip().split(".")
    try:
        if len(parts) < 2 or len(parts) > 4:
            raise ValueError
        major, minor = int(parts[0]), int(parts[1])
        for extra in parts[2:]:
            int(extra)
    except ValueError:
        raise ValueError(f"Neuron SDK release {release!r} is not a release number like 2.21 or 2.18.0") from None
    return major, minor


def era_of(release: str) -> SdkEra:
    """The newest modelled era at or before ``release``."""
    key = release_key(release)
    found = [e for e in ERAS if release_key(e.release) <= key]
    if not found:
        raise ValueError(f"Neuron SDK {release} is older than the oldest modelled release, {ERAS[0].release}")
    return found[-1]


def has(release: str, feature: str) -> bool:
    """Whether ``release`` has the mechanism ``feature`` (a key of :data:`INTRODUCED`)."""
    return release_key(release) >= release_key(INTRODUCED[feature])


def missing(release: str, feature: str) -> str:
    """One line: ``release`` does not have ``feature`` yet."""
    return f"{FEATURE_NAMES[feature]} arrived in Neuron SDK {INTRODUCED[feature]}; --sdk {release} does not have it"
