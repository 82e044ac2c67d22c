"""Cost model: captured ATen ops -> simulated NeuronCore-v2 engine time (pure functions, torch-free).

``engines`` classifies ops, ``ops`` times one op, ``graph`` a step graph, ``collectives`` the
calibrated NeuronLink/EFA links, ``torus`` the ring a group of cores forms, ``topology`` every
collective's cost on its group's cores, ``dtypes`` auto-cast and stochastic rounding, ``compile`` the
simulated compile of a new graph, ``calibration`` the published rows. See docs/cost-model.md.
"""

from emulator.costmodel.collectives import CollectiveLinks, links_for
from emulator.costmodel.compile import CompileCost, compile_cost, runtime_model_code_overhead_bytes
from emulator.costmodel.dtypes import CostOptions, options_from_env
from emulator.costmodel.engines import (
    OP_TABLE,
    Engine,
    OpClass,
    OpKind,
    classify,
    classify_name,
    normalize_op_name,
    unknown_op_names,
)
from emulator.costmodel.graph import GraphCost, cost_graph
from emulator.costmodel.ops import OpCost, cost_op, matmul_efficiency
from emulator.costmodel.topology import GroupCollectiveCost, cost_group_collective
from emulator.costmodel.torus import ring_order

__all__ = [
    "OP_TABLE",
    "CollectiveLinks",
    "CompileCost",
    "CostOptions",
    "Engine",
    "GraphCost",
    "GroupCollectiveCost",
    "OpClass",
    "OpCost",
    "OpKind",
    "classify",
    "classify_name",
    "compile_cost",
    "cost_graph",
    "cost_group_collective",
    "cost_op",
    "links_for",
    "matmul_efficiency",
    "normalize_op_name",
    "options_from_env",
    "ring_order",
    "runtime_model_code_overhead_bytes",
    "unknown_op_names",
]
