"""Collectives overlapped with compute (neurontools/contract/overlap.py; docs/parallel.md
§Collectives and compute): the placement rule, the traced sequence-parallel backward that uses it,
and the plan and profile that apply it."""

from __future__ import annotations

import pytest
import torch

from emulator.hardware import get_instance_type
from emulator.parallel import comm
from emulator.parallel.job import JobPlan
from emulator.parallel.ranks import ParallelState, RankGrid
from emulator.parallel.runner import JobRequest, plan_request
from neurontools.contract.overlap import place_calls

# four ops at captured positions 0..3, one second each, back to back
INDEX, STARTS, ENDS = (0, 1, 2, 3), (0.0, 1.0, 2.0, 3.0), (1.0, 2.0, 3.0, 4.0)


def test_a_collective_waited_for_at_once_moves_every_later_op_by_its_seconds() -> None:
    p = place_calls(INDEX, STARTS, ENDS, [(1, None, 0.5), (1, None, 0.25), (3, None, 1.0)])
    assert [(s.start, s.end, s.exposed) for s in p.spans] == [(1.0, 1.5, 0.5), (1.5, 1.75, 0.25), (3.75, 4.75, 1.0)]
    assert [p.shift(i) for i in INDEX] == [0.0, 0.75, 0.75, 1.75]
    assert p.exposed == 1.75


def test_ops_before_the_wait_hide_a_collective_up_to_their_length() -> None:
    hidden = place_calls(INDEX, STARTS, ENDS, [(1, 3, 1.5)])  # ops 1 and 2 (2 s) run meanwhile
    assert hidden.exposed == 0.0 and [hidden.shift(i) for i in INDEX] == [0.0] * 4
    partly = place_calls(INDEX, STARTS, ENDS, [(1, 2, 1.5)])  # only op 1 (1 s) hides it
    assert partly.exposed == pytest.approx(0.5)
    assert [partly.shift(i) for i in INDEX] == [0.0, 0.0, 0.5, 0.5]
    at_end = place_calls(INDEX, STARTS, ENDS, [(2, 99, 3.0)])  # needed by nothing: the graph's end
    assert at_end.exposed == pytest.approx(1.0)


def test_pipelined_ops_hide_a_collective_until_the_last_of_them_ends() -> None:
    # op 1 ends at 3.0 although op 2 may start at 1.5 (it streams one tile behind op 1)
    starts, ends = (0.0, 1.0, 1.5, 3.0), (1.0, 3.0, 3.0, 4.0)
    p = place_calls(INDEX, starts, ends, [(1, 2, 2.5)])
    assert p.exposed == pytest.approx(0.5)  # ends at 3.5; ops 1.. end at 3.0
    assert place_calls(INDEX, starts, ends, [(1, None, 2.5)]).exposed == 2.5  # waited for at once


def test_the_cc_cores_run_one_collective_at_a_time() -> None:
    p = place_calls(INDEX, STARTS, ENDS, [(0, 4, 1.0), (1, 4, 2.0)])
    assert [(s.start, s.end) for s in p.spans] == [(0.0, 1.0), (1.0, 3.0)]
    assert p.exposed == 0.0
    # an immediate collective behind a running one waits for the CC-cores: its delay counts from there
    q = place_calls(INDEX, STARTS, ENDS, [(0, 4, 2.0), (1, None, 0.5)])
    assert q.spans[1].start == 2.0 and q.spans[1].exposed == pytest.approx(1.5)
    assert q.exposed == pytest.approx(1.5)  # the first ends at 2.0, long before the shifted end
    # a later wait point that an earlier collective delays already
    r = place_calls(INDEX, STARTS, ENDS, [(0, 3, 2.5), (1, None, 1.0)])
    assert r.spans[1].start == 2.5 and r.spans[1].exposed == pytest.approx(2.5)
    assert r.spans[0].exposed == 0.0 and r.exposed == pytest.approx(2.5)


@pytest.fixture(scope="module")
def sp_plan() -> JobPlan:  # BERT-Large, TP 2 with sequence parallelism, on a trn1.2xlarge
    request = JobRequest("bert-large", tp=2, dp=1, micro_batch=1, seq_len=128, sequence_parallel=True)
    return plan_request(request, get_instance_type("trn1.2xlarge"), env={})


def test_sequence_parallel_backward_overlaps_its_gathers_and_scatters(sp_plan: JobPlan) -> None:
    graph = sp_plan.stages[0].program.graphs["micro_step"]
    assert graph.schedule is not None
    calls = graph.schedule.collectives
    waited = [c for c in calls if c.wait_op is not None and c.wait_op > c.after_op]
    kinds = {c.kind for c in waited}
    assert kinds == {"all_gather", "reduce_scatter"}, kinds
    t = sp_plan.stages[0].times["micro_step"]
    assert 0 < t.exposed < t.collective_seconds
    assert t.device_seconds == pytest.approx(t.compute_seconds + t.exposed)


def test_the_recording_communicator_notes_where_an_overlapped_result_is_needed() -> None:
    captured = [0]  # ops captured so far in the graph
    rec = comm.RecordingCommunicator(ParallelState(RankGrid(tp=2)), position=lambda: captured[0])
    x = torch.empty(4, 8, device="meta")
    comm.set_communicator(rec)
    try:
        captured[0] = 3
        comm.all_gather(x, 0, "tp")  # waited for at once
        with comm.overlapped():
            comm.all_gather(x, 0, "tp")
            captured[0] = 5  # two ops run while it does
        graph = rec.take()
        with comm.overlapped():
            comm.reduce_scatter(x, 0, "tp")
            cut = rec.take()  # the graph is cut inside the block: its call stays waited for at once
    finally:
        comm.set_communicator(None)
    assert [(c.after_op, c.wait_op) for c in graph] == [(3, None), (3, 5)]
    assert [(c.after_op, c.wait_op) for c in cut] == [(5, None)]
    with comm.overlapped():  # no communicator: nothing to note
        assert comm.all_gather(x, 0, "tp") is x
