"""Core ownership rules of the daemon's registry, with a fake process table (no real processes)."""

from __future__ import annotations

import pytest

from emulator.daemon.registry import AttachRequest, ClaimError, Registry
from emulator.hardware import build_inventory, make_identity


class FakeHost:
    """PID -> start time; a missing PID is a dead process."""

    def __init__(self) -> None:
        self.procs: dict[int, float] = {}

    def __call__(self, pid: int) -> float | None:
        return self.procs.get(pid)


@pytest.fixture
def host() -> FakeHost:
    return FakeHost()


def registry(host: FakeHost, itype: str = "trn1.32xlarge") -> Registry:
    inv = build_inventory(itype, make_identity(itype, seed="test"))
    return Registry(inv, start_time_of=host)


def req(pid: int, **kw: object) -> AttachRequest:
    return AttachRequest(pid=pid, command=f"python3 job{pid}.py", tag="", runtime_version="2.29.14", **kw)  # type: ignore[arg-type]


def test_default_claims_every_core_and_tag_defaults_to_pid(host: FakeHost) -> None:
    host.procs[10] = 1.0
    reg = registry(host)
    proc = reg.attach(req(10))
    assert proc.neuroncores == tuple(range(32)) and proc.tag == "10"


def test_num_cores_takes_lowest_free_contiguous_block(host: FakeHost) -> None:
    host.procs.update({1: 1.0, 2: 1.0, 3: 1.0})
    reg = registry(host)
    reg.attach(req(1, visible_cores=(2, 3)))
    assert reg.attach(req(2, num_cores=2)).neuroncores == (0, 1)
    assert reg.attach(req(3, num_cores=3)).neuroncores == (4, 5, 6)


def test_conflict_names_holders_and_changes_nothing(host: FakeHost) -> None:
    host.procs.update({1: 1.0, 2: 1.0})
    reg = registry(host)
    reg.attach(req(1, visible_cores=(0, 1)))
    with pytest.raises(ClaimError) as err:
        reg.attach(req(2, visible_cores=(1, 2)))
    assert err.value.http_status == 409 and err.value.nrt_status == "NRT_EXEC_NC_BUSY"
    assert "Requested:nc1-nc2 Available:1" in err.value.message
    assert "nc1-nc1 held by PID 1 ('python3 job1.py')" in err.value.message
    assert reg.owners() == {0: 1, 1: 1}
    assert [p.pid for p in reg.processes()] == [1]


def test_reap_releases_dead_and_recycled_pids(host: FakeHost) -> None:
    host.procs.update({1: 1.0, 2: 1.0})
    reg = registry(host)
    reg.attach(req(1, visible_cores=(0,)))
    reg.attach(req(2, visible_cores=(1,)))
    del host.procs[1]  # died
    host.procs[2] = 2.0  # PID 2 now belongs to a newer process
    assert sorted(p.pid for p in reg.reap()) == [1, 2]
    assert reg.owners() == {} and reg.processes() == []


def test_recycled_pid_may_attach_again(host: FakeHost) -> None:
    host.procs[5] = 1.0
    reg = registry(host)
    reg.attach(req(5, visible_cores=(0,)))
    host.procs[5] = 9.0  # old process gone, a new one with the same PID attaches before the reaper ran
    assert reg.attach(req(5, visible_cores=(3,))).neuroncores == (3,)
    assert reg.owners() == {3: 5}


def test_tools_hold_no_cores(host: FakeHost) -> None:
    host.procs.update({1: 1.0, 2: 1.0})
    reg = registry(host, "trn1.2xlarge")
    tool = reg.attach(AttachRequest(pid=1, command="neuron-ls -a", tag="", runtime_version="x", kind="tool"))
    assert tool.neuroncores == () and tool.runtime_version == "NA"
    assert reg.attach(req(2)).neuroncores == (0, 1)


@pytest.mark.parametrize(
    ("kw", "status", "text"),
    [
        ({"visible_cores": (2,)}, 400, "NeuronCore 2 does not exist (trn1.2xlarge has NeuronCores 0-1)"),
        ({"visible_cores": (0, 0)}, 400, "contiguous"),
        ({"visible_cores": ()}, 400, "empty"),
        ({"num_cores": 3}, 400, "asks for 3 NeuronCores, trn1.2xlarge has 2"),
    ],
)
def test_invalid_requests(kw: dict[str, object], status: int, text: str, host: FakeHost) -> None:
    host.procs[1] = 1.0
    with pytest.raises(ClaimError) as err:
        registry(host, "trn1.2xlarge").attach(req(1, **kw))
    assert err.value.http_status == status and text in err.value.message


def test_unknown_pid_is_refused(host: FakeHost) -> None:
    with pytest.raises(ClaimError, match="not running on this host"):
        registry(host).attach(req(77))
