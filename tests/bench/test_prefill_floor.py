"""benchmarks/prefill_ttft.py's floor on CPU: the GEMMs it times are the model's, layer by layer (dense
layers' MLP, MoE layers' shared expert and routed experts as grouped GEMMs), for the checkpoints the
benchmarks write."""
from benchmarks.prefill_ttft import floor_gemms


def test_dense_checkpoint_floor_is_four_layers_of_projections_and_mlp():
    from dcpctl.bench.decode import SHAPES
    cfg = dict(SHAPES["v3"], num_hidden_layers=4, first_k_dense_replace=4, intermediate_size=2048,
               n_routed_experts=256, num_experts_per_tok=8, moe_intermediate_size=2048)
    got = floor_gemms(cfg, 1000)
    assert all(count == 4 and rows == 1000 and groups == 1 for count, rows, _, _, groups in got)
    assert [(kin, kout) for _, _, kin, kout, _ in got][-2:] == [(cfg["hidden_size"], 4096),
                                                                (2048, cfg["hidden_size"])]
    assert len(got) == 6


def test_moe_checkpoint_floor_has_grouped_experts_and_the_shared_one():
    from dcpctl.bench.decode import SHAPES
    moe = {"n_routed_experts": 32, "num_experts_per_tok": 8, "moe_intermediate_size": 256,
           "n_shared_experts": 1, "first_k_dense_replace": 1}
    cfg = dict(SHAPES["v3"], num_hidden_layers=16, **moe)
    D = cfg["hidden_size"]
    got = floor_gemms(cfg, 100)
    assert (15, 800, D, 512, 32) in got and (15, 800, 256, D, 32) in got      # routed: 100 x top-8 rows
    assert (15, 100, D, 512, 1) in got and (15, 100, 256, D, 1) in got        # the shared expert
    assert (1, 100, D, 2 * cfg["intermediate_size"], 1) in got                # layer 0's dense MLP
    assert sum(count for count, *_ in got if count == 16) == 16 * 4           # every layer's 4 projections
