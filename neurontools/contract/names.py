"""The names every tool shares, written once: memory categories, NeuronCore engines, ECC events.

Each name has its key (as the daemon snapshot and the neuron-monitor report spell it,
docs/snapshot.md and docs/reference/neuron-monitor.md), neuron-top's label for it
(docs/reference/neuron-top.md §Memory categories) and a one-line description. The key orders the
other modules need are derived here too (``report.schema`` re-exports them); no tool spells
these names.

Orders:

* memory categories are listed in neuron-top's display order; the report writes them as Go maps,
  so with **sorted** keys (docs/reference/neuron-monitor.md §Encoding): ``*_KEYS`` are sorted;
* engines in the snapshot's and neuron-top's order (TensorE first);
* ECC events in the report's struct order (docs/reference/neuron-monitor.md
  §``neuron_hw_counters``); the daemon snapshot and sysfs list them sorted (``ECC_EVENTS``).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Name:
    key: str  # as the snapshot and the report spell it
    label: str  # neuron-top's label ("": neuron-top does not show it)
    description: str


@dataclass(frozen=True)
class Category(Name):
    """A memory category and where the runtime reports it."""

    host: bool = False  # in a process's host memory breakdown
    device: bool = False  # in a NeuronCore's device memory breakdown
    load_time: bool = False  # in a loaded model's device allocation (subgraph ``neuron_device``)


# neuron-top's order: its Memory Usage Summary rows and memory tree leaves.
MEMORY_CATEGORIES: tuple[Category, ...] = (
    Category("tensors", "Tensors", "tensors", host=True, device=True, load_time=True),
    Category(
        "constants", "Constants", "constants (training) / weights (inference)", host=True, device=True, load_time=True
    ),
    Category("model_code", "Model Code", "executable code of the loaded models", device=True, load_time=True),
    Category("runtime_memory", "Runtime Memory", "the runtime's own device memory", device=True, load_time=True),
    Category("model_shared_scratchpad", "Model Scratchpad", "scratchpad shared by the models of a core", device=True),
    Category("dma_buffers", "DMA Buffers", "host buffers for DMA", host=True),
    Category("application_memory", "App. Memory", "everything else the application holds", host=True),
)
HOST_CATEGORIES = tuple(c for c in MEMORY_CATEGORIES if c.host)
DEVICE_CATEGORIES = tuple(c for c in MEMORY_CATEGORIES if c.device)

# Key orders of the report's (and the snapshot's) memory objects: sorted.
HOST_MEMORY_KEYS = tuple(sorted(c.key for c in HOST_CATEGORIES))
CORE_MEMORY_KEYS = tuple(sorted(c.key for c in DEVICE_CATEGORIES))
SUBGRAPH_DEVICE_MEMORY_KEYS = tuple(sorted(c.key for c in MEMORY_CATEGORIES if c.load_time))

# NeuronCore-v2 engines whose busy time the daemon snapshot carries (docs/snapshot.md); labels
# are neuron-top's engine view headings.
ENGINES: tuple[Name, ...] = (
    Name("tensor", "TensorE", "matrix multiplications and convolutions (128x128 systolic array)"),
    Name("vector", "VectorE", "arithmetic, reductions, normalizations, softmax"),
    Name("scalar", "ScalarE", "non-linear functions"),
    Name("gpsimd", "GpSimd", "programmable SIMD: gather/scatter, sorting, random numbers"),
    Name("dma", "DMA", "data movement"),
)
ENGINE_KEYS = tuple(e.key for e in ENGINES)

# ECC events per Neuron device, in the report's struct order.
MEM_ECC_CORRECTED = Name("mem_ecc_corrected", "", "corrected ECC events of the device DRAM (HBM)")
MEM_ECC_UNCORRECTED = Name("mem_ecc_uncorrected", "", "uncorrected ECC events of the device DRAM (HBM)")
SRAM_ECC_UNCORRECTED = Name("sram_ecc_uncorrected", "", "uncorrected ECC events of on-chip SRAM")
SRAM_ECC_CORRECTED = Name("sram_ecc_corrected", "", "corrected ECC events of on-chip SRAM")
ECC_EVENT_NAMES: tuple[Name, ...] = (MEM_ECC_CORRECTED, MEM_ECC_UNCORRECTED, SRAM_ECC_UNCORRECTED, SRAM_ECC_CORRECTED)
HW_COUNTER_KEYS = tuple(e.key for e in ECC_EVENT_NAMES)  # the report's order
ECC_EVENTS = tuple(sorted(HW_COUNTER_KEYS))  # the daemon's, sysfs' and the Prometheus series' order
