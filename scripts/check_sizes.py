"""Fail when a module of the product grows past 500 lines or a function past 60 (``make lint``).

Small modules with one concept each, and functions a reader takes in at once, are the project's
rule (docs/development.md). Declarative tables are exempt by name: list a module in TABLES only
when it is data, not logic.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

MAX_MODULE_LINES = 500
MAX_FUNCTION_LINES = 60
ROOTS = ("neurontools", "emulator")
TABLES: frozenset[str] = frozenset()  # e.g. "emulator/hardware/neuroncore_v2.py", if it ever needs it


def problems(root: Path) -> list[str]:
    found = []
    for package in ROOTS:
        for path in sorted((root / package).rglob("*.py")):
            name = path.relative_to(root).as_posix()
            if name in TABLES:
                continue
            source = path.read_text(encoding="utf-8")
            lines = source.count("\n")
            if lines > MAX_MODULE_LINES:
                found.append(f"{name}: {lines} lines (at most {MAX_MODULE_LINES})")
            for node in ast.walk(ast.parse(source, filename=name)):
                if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                    length = (node.end_lineno or node.lineno) - node.lineno + 1
                    if length > MAX_FUNCTION_LINES:
                        limit = MAX_FUNCTION_LINES
                        found.append(f"{name}:{node.lineno}: {node.name} is {length} lines (at most {limit})")
    return found


def main() -> int:
    found = problems(Path(__file__).resolve().parent.parent)
    for line in found:
        print(line, file=sys.stderr)
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
