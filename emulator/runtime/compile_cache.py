"""Compile cache: a step graph is identified by the hash of its ops and shapes.

Two levels, as with neuronx-cc (docs/reference/trn1-runtime.md §Compile cache): an in-memory JIT cache of models
loaded in this process, and the on-disk Neuron Persistent Cache shared across runs
(``NEURON_COMPILE_CACHE_URL``, ``--cache_dir`` in ``NEURON_CC_FLAGS``, default
``/var/tmp/neuron-compile-cache``; ``--no_cache`` turns it off). The disk layout is the real
one, ``neuronxcc-<version>/MODULE_<graph-hash>+<flags-hash>/`` with ``compile_flags.json`` and
``model.done``; the emulator stores a JSON summary of the graph instead of a NEFF binary, and the
graph's op records (``model.ops.json.gz``), from which ``neuron-emulator profile-graph`` replays it
(docs/profiling.md). A model-scale job's graphs are stored without them (its ops are traced on
``meta`` once and not kept).
"""

from __future__ import annotations

import contextlib
import gzip
import hashlib
import json
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from emulator.capture.ops import OpRecord, TensorMeta
from emulator.runtime.execution import CompileCacheCounter, ModelRef

COMPILER_VERSION = "2.14.227.0"  # emulated neuronx-cc (docs/reference/trn1-runtime.md §Version strings of the examples)
DEFAULT_CACHE_DIR = "/var/tmp/neuron-compile-cache"
EXTRACTED = "model.hlo.json"  # a graph extracted for ahead-of-time compilation, not compiled yet
FIRST_MODEL_ID = 10001  # runtime-assigned model ids start here (docs/reference/neuron-monitor.md §memory_used)
OPS_FILE = "model.ops.json.gz"  # the graph's op records
OPS_FORMAT = "neuron-emulator-ops"


def graph_hash(ops: Sequence[OpRecord]) -> str:
    digest = hashlib.sha256()
    for op in ops:
        digest.update(repr(op.signature()).encode())
        digest.update(b"\n")
    return digest.hexdigest()


@dataclass(frozen=True)
class LoadedModel:
    graph_hash: str
    model_id: int
    uuid: str
    name: str
    code_bytes: int
    ops: int

    def ref(self) -> ModelRef:
        """The model as an execution report names it."""
        return ModelRef(model_id=self.model_id, uuid=self.uuid, name=self.name, code_bytes=self.code_bytes)


def pending_graphs(cache_dir: Path) -> list[Path]:
    """Module directories holding an extracted graph that is not compiled yet."""
    root = cache_dir / f"neuronxcc-{COMPILER_VERSION}"
    if not root.is_dir():
        return []
    return sorted(m for m in root.iterdir() if (m / EXTRACTED).exists() and not (m / "model.done").exists())


def finish_compile(module: Path) -> None:
    """Mark an extracted graph compiled: the files a compiled module has (see ``store``)."""
    summary = json.loads((module / EXTRACTED).read_text())
    (module / "compile_flags.json").write_text(json.dumps(summary.get("flags", [])))
    (module / "model.json").write_text(
        json.dumps({k: summary[k] for k in ("graph_hash", "ops", "model_code_bytes")})
    )
    (module / "model.done").touch()


def cache_settings(env: Mapping[str, str]) -> tuple[Path | None, str]:
    """(persistent cache directory or None when disabled, compiler flags string)."""
    flags = env.get("NEURON_CC_FLAGS", "")
    try:
        words = shlex.split(flags)
    except ValueError:
        words = flags.split()
    if "--no_cache" in words:
        return None, flags
    cache_dir = env.get("NEURON_COMPILE_CACHE_URL") or DEFAULT_CACHE_DIR
    for i, word in enumerate(words):
        if word.startswith("--cache_dir="):
            cache_dir = word.split("=", 1)[1]
        elif word == "--cache_dir" and i + 1 < len(words):
            cache_dir = words[i + 1]
    if "://" in cache_dir:  # s3:// and other remote caches are not reachable here: in-memory only
        return None, flags
    return Path(cache_dir), flags


class CompileCache:
    def __init__(self, cache_dir: Path | None, flags: str = "") -> None:
        self.cache_dir = cache_dir
        self.flags = flags
        self.flags_hash = hashlib.sha256(flags.encode()).hexdigest()[:20]
        self._loaded: dict[str, LoadedModel] = {}
        self._next_id = FIRST_MODEL_ID
        self.counts = CompileCacheCounter()  # hits and misses of this process

    def loaded(self, digest: str) -> LoadedModel | None:
        return self._loaded.get(digest)

    def loaded_models(self) -> list[LoadedModel]:
        """The models loaded in this process, in load order (safe to call from another thread)."""
        return list(self._loaded.values())

    def module_dir(self, digest: str) -> Path | None:
        if self.cache_dir is None:
            return None
        return self.cache_dir / f"neuronxcc-{COMPILER_VERSION}" / f"MODULE_{digest[:20]}+{self.flags_hash[:8]}"

    def on_disk(self, digest: str) -> bool:
        module = self.module_dir(digest)
        return module is not None and (module / "model.done").exists()

    def store(self, digest: str, ops: Sequence[OpRecord], code_bytes: int) -> None:
        module = self.module_dir(digest)
        if module is None:
            return
        with contextlib.suppress(OSError):  # a read-only or full cache only costs recompiles
            module.mkdir(parents=True, exist_ok=True)
            (module / "compile_flags.json").write_text(json.dumps(shlex.split(self.flags) if self.flags else []))
            summary = {"graph_hash": digest, "ops": len(ops), "model_code_bytes": code_bytes}
            (module / "model.json").write_text(json.dumps(summary))
            write_ops(module, ops)
            (module / "model.done").touch()

    # -- ahead-of-time compilation (neuron_parallel_compile: docs/run-your-script.md) ---------
    def extract(self, digest: str, ops: Sequence[OpRecord], compile_seconds: float, code_bytes: int) -> Path | None:
        """Keep a graph to compile later (the real tool writes ``model.hlo.pb``; the emulator a
        JSON summary with what compiling it will take). None: the cache is off."""
        module = self.module_dir(digest)
        if module is None:
            return None
        with contextlib.suppress(OSError):
            module.mkdir(parents=True, exist_ok=True)
            summary = {
                "graph_hash": digest,
                "ops": len(ops),
                "model_code_bytes": code_bytes,
                "compile_seconds": compile_seconds,
                "flags": shlex.split(self.flags) if self.flags else [],
            }
            (module / EXTRACTED).write_text(json.dumps(summary))
            write_ops(module, ops)
        return module / EXTRACTED

    def load(self, digest: str, ops: Sequence[OpRecord], code_bytes: int) -> LoadedModel:
        model = LoadedModel(
            graph_hash=digest,
            model_id=self._next_id,
            uuid=digest[:32],
            name=f"{COMPILER_VERSION}+{digest[:8]}-/tmp/neuroncc_compile_workdir/{digest[8:16]}",
            code_bytes=code_bytes,
            ops=len(ops),
        )
        self._next_id += 1
        self._loaded[digest] = model
        return model


# -- the op records of a cached graph -------------------------------------------------------------


def _meta(t: TensorMeta) -> list:
    return [list(t.shape), t.dtype, t.nbytes]


def write_ops(module: Path, ops: Sequence[OpRecord]) -> None:
    """Keep the graph's op records in its module directory (gzip JSON; none: nothing written)."""
    if not ops:
        return
    rows = [[op.name, [_meta(t) for t in op.inputs], [_meta(t) for t in op.outputs], op.flops] for op in ops]
    tmp = module / (OPS_FILE + ".tmp")
    with gzip.open(tmp, "wt", encoding="utf-8") as out:
        json.dump({"format": OPS_FORMAT, "version": 1, "ops": rows}, out, separators=(",", ":"))
    tmp.replace(module / OPS_FILE)


def read_ops(module: Path) -> list[OpRecord] | None:
    """The op records kept with a cached graph; None when it has none (or they are unreadable)."""
    try:
        with gzip.open(module / OPS_FILE, "rt", encoding="utf-8") as f:
            data = json.load(f)
        if data.get("format") != OPS_FORMAT or data.get("version") != 1:
            return None
        return [
            OpRecord(
                str(name),
                tuple(TensorMeta(tuple(s), str(d), int(n)) for s, d, n in ins),
                tuple(TensorMeta(tuple(s), str(d), int(n)) for s, d, n in outs),
                int(flops),
            )
            for name, ins, outs, flops in data["ops"]
        ]
    except (OSError, EOFError, ValueError, TypeError, KeyError, AttributeError):
        return None


def cached_graphs(cache_dir: Path, prefix: str) -> dict[str, Path]:
    """Graph hash -> module directory of every compiled graph in the cache whose hash starts
    with ``prefix`` (any compiler flags)."""
    root = cache_dir / f"neuronxcc-{COMPILER_VERSION}"
    found: dict[str, Path] = {}
    if not root.is_dir():
        return found
    for module in sorted(root.glob(f"MODULE_{prefix[:20]}*")):
        try:
            digest = str(json.loads((module / "model.json").read_text())["graph_hash"])
        except (OSError, ValueError, KeyError, TypeError):
            continue
        if digest.startswith(prefix) and (module / "model.done").exists():
            found.setdefault(digest, module)
    return found
