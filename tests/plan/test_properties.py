"""Random topologies either plan with groups that partition the ranks and contain every DCP group,
or produce violations; the planner never raises."""
from hypothesis import given, settings
from hypothesis import strategies as st

from dcpctl.plan.topology import Topology
from tests.plan.helpers import plan

sizes = st.sampled_from([1, 2, 3, 4, 6, 8, 16, 32, 64])


@settings(max_examples=300, deadline=None)
@given(tp=sizes, dp=sizes, dpa=st.booleans(), dcp=sizes, ep=sizes, pp=st.sampled_from([1, 2, 4]),
       nnodes=st.sampled_from([1, 2, 4, 8]))
def test_random_topologies(tp, dp, dpa, dcp, ep, pp, nnodes):
    p = plan(model_name="kimi-k2", hardware="gb200-nvl72", tp_size=tp, dp_size=dp, enable_dp_attention=dpa,
             dcp_size=dcp, ep_size=ep, pp_size=pp, nnodes=nnodes)
    topo_rules = {"tp_dp", "tp_dcp", "dcp_containment", "tp_ep", "heads", "nodes", "node_fit", "pp_layers"}
    if any(v.code in topo_rules for v in p.violations):
        return
    t: Topology = p.request.topology
    world = list(range(t.total_gpus))
    for kind, gs in p.groups.items():
        assert sorted(r for g in gs for r in g) == world, kind
    attn_tp = [set(g) for g in p.groups["attn_tp"]]
    replicas = [set(g) for g in p.groups["attn_dp"]]
    for g in p.groups["dcp"]:
        assert len(g) == dcp
        assert sum(set(g) <= a for a in attn_tp) == 1
        assert sum(set(g) <= r for r in replicas) == 1
    assert p.memory["kv_bytes_per_token_per_rank"] * dcp == p.memory["kv_bytes_per_token"]
