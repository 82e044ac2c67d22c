"""The model code of model-scale jobs: one configurable transformer built of the tensor-parallel
layers (:mod:`emulator.parallel.layers`), one pipeline stage at a time (docs/models.md)."""
