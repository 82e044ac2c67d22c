from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

# Under pytest-xdist (``make test`` runs two workers) each worker and every process a test starts
# use one math thread: two workers with two OpenMP threads each on a 2-core machine spin against
# each other (a 5 s training test took 120 s). Set before anything imports torch.
if os.environ.get("PYTEST_XDIST_WORKER"):
    os.environ["OMP_NUM_THREADS"] = "1"
    os.environ["MKL_NUM_THREADS"] = "1"

from tests.support import Daemon, Holder, start_daemon

IN_CI = os.environ.get("CI") == "true"
# The per-process (per xdist worker) runtime directory and compile cache: see pytest_configure.
_saved_env: dict[str, str | None] = {}
# The longest files, longest first (pytest --durations per file on the 2-vCPU machine, loaded:
# multinode ~470 s, training_e2e ~270 s, run_your_script ~210 s, cluster_faults ~150 s,
# parallel_e2e ~110 s, fleet_e2e ~85 s, security ~55 s). Only the order of the longest matters.
SLOW_FILES = (
    "test_multinode.py",
    "test_training_e2e.py",
    "test_run_your_script.py",
    "test_cluster_faults.py",
    "test_parallel_e2e.py",
    "test_fleet_e2e.py",
    "test_security.py",
)


def pytest_configure(config: pytest.Config) -> None:
    _isolate(config)
    _run_slow_files_first(config)


def _isolate(config: pytest.Config) -> None:
    """Every pytest process (each xdist worker, or the one process) gets a private directory
    before any test runs, and every process a test starts inherits it (tests.support.tool_env):

    - ``XDG_RUNTIME_DIR``: default daemon sockets, TCP tokens and cluster state files;
    - ``NEURON_COMPILE_CACHE_URL``: the persistent compile cache (a test needing a cold or warm
      cache passes its own);
    - ``TMPDIR``: for the processes tests start (job work directories, and the base of
      ``/tmp/neuron-emulator-<uid>`` when a test unsets ``XDG_RUNTIME_DIR``). This process's own
      temporary files (pytest's ``tmp_path``) stay in /tmp: ``gettempdir`` is fixed first.

    So no test writes to /var/tmp/neuron-compile-cache or the user's real runtime directory, and
    none sees what another worker (or an earlier session) left there. The path is short: Unix
    socket paths are limited to 107 bytes.
    """
    import tempfile

    tempfile.gettempdir()  # fixed before TMPDIR changes
    root = Path(tempfile.mkdtemp(prefix="nt-run-", dir="/tmp"))  # 0700
    values = {"XDG_RUNTIME_DIR": root, "NEURON_COMPILE_CACHE_URL": root / "compile-cache", "TMPDIR": root / "tmp"}
    values["TMPDIR"].mkdir()
    for name, value in values.items():
        _saved_env[name] = os.environ.get(name)
        os.environ[name] = str(value)
    config.stash[_ROOT] = root


def _run_slow_files_first(config: pytest.Config) -> None:
    """Under xdist, keep the order of pytest_collection_modifyitems: by default xdist hands out
    files by their number of tests, which puts the long end-to-end files of two or three tests
    last, where one of them keeps a worker busy alone after the other has finished."""
    if hasattr(config.option, "loadscopereorder"):
        config.option.loadscopereorder = False


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The longest files first (SLOW_FILES), every other file after them in its usual order; a
    file's tests stay together and in order (module fixtures, ``--dist loadfile``)."""
    rank = {name: i for i, name in enumerate(SLOW_FILES)}
    items.sort(key=lambda item: rank.get(item.path.name, len(SLOW_FILES)))


def pytest_unconfigure(config: pytest.Config) -> None:
    import shutil

    for name, value in _saved_env.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value
    root = config.stash.get(_ROOT, None)
    if root is not None:
        shutil.rmtree(root, ignore_errors=True)


_ROOT = pytest.StashKey[Path]()


@pytest.fixture
def short_tmp(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A temporary directory with a short path (Unix socket paths are limited to 107 bytes)."""
    import tempfile

    path = Path(tempfile.mkdtemp(prefix="nt-", dir="/tmp"))
    yield path
    import shutil

    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def daemon_factory(short_tmp: Path) -> Iterator:
    started: list[Daemon] = []

    def start(instance_type: str = "trn1.2xlarge", **kwargs: object) -> Daemon:
        daemon = start_daemon(short_tmp, instance_type, **kwargs)  # type: ignore[arg-type]
        started.append(daemon)
        return daemon

    yield start
    for daemon in started:
        if daemon.proc.poll() is None:
            daemon.stop()


@pytest.fixture
def daemon(daemon_factory) -> Daemon:
    return daemon_factory("trn1.2xlarge")


@pytest.fixture
def no_communicator() -> Iterator[None]:
    """No collective communicator is set before or after the test (emulator.parallel.comm)."""
    from emulator.parallel.comm import set_communicator

    set_communicator(None)
    yield
    set_communicator(None)


def _kill_all(started: list) -> None:
    """Kills whatever of ``started`` (objects with a ``proc``) still runs, and reaps it."""
    for item in started:
        if item.proc.poll() is None:
            item.proc.kill()
        item.proc.wait(timeout=15)


@pytest.fixture
def holders() -> Iterator[list[Holder]]:
    """Collects started holder processes and makes sure none outlives the test."""
    started: list[Holder] = []
    yield started
    _kill_all(started)


@pytest.fixture
def exporters() -> Iterator[list]:
    """Collects started neuron-exporter processes (tests.test_exporter_app.Exporter); none outlives the test."""
    started: list = []
    yield started
    _kill_all(started)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """In CI a skipped test is a failure: nothing may silently not run."""
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    skipped = reporter.stats.get("skipped", []) if reporter else []
    if IN_CI and skipped:
        reporter.write_line(f"CI=true: {len(skipped)} test(s) skipped - treated as failure", red=True)
        session.exitstatus = 1
