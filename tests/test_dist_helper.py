import torch
import torch.distributed as dist

from dcpctl.runtime.parallel import ParallelState
from tests.dist import run_ranks


def _allreduce(rank, world):
    t = torch.tensor([rank + 1.0])
    dist.all_reduce(t)
    return t.item()


def _state(rank, world):
    groups = {"tp": [[0, 1, 2, 3]], "attn_tp": [[0, 1], [2, 3]], "attn_dp": [[0, 1], [2, 3]],
              "dcp": [[0, 1], [2, 3]], "ep": [[0, 1, 2, 3]]}
    ps = ParallelState.build(groups, attn_dp_size=2)
    return ps.dcp.ranks, ps.dcp.rank, ps.attn_dp_index


def test_run_ranks_allreduce():
    assert run_ranks(_allreduce, 4) == [10.0] * 4


def test_parallel_state_from_groups():
    out = run_ranks(_state, 4)
    assert out[3] == ([2, 3], 1, 1)
    assert out[0] == ([0, 1], 0, 0)
