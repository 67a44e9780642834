from tests.plan.helpers import plan


def test_kv_bytes_contract():
    p = plan(tp_size=8, dcp_size=8)
    assert p.memory["kv_bytes_per_token"] == 61 * 576 * 2
    assert p.memory["kv_bytes_per_token_per_rank"] == 61 * 576 * 2 / 8
    assert plan(tp_size=8, dcp_size=8, kv_cache_dtype="fp8_e4m3").memory["kv_bytes_per_token"] == 61 * 576


def test_capacity_gain_is_c_without_replication():
    p = plan(tp_size=8, dcp_size=8)
    assert p.memory["capacity_gain_vs_dcp1"] == 8.0
    assert p.memory["kv_rows_per_rank"] * 8 == p.memory["kv_virtual_tokens"]


def test_draft_kv_is_not_striped():
    p = plan(tp_size=8, dcp_size=8, speculative_algorithm="EAGLE", speculative_num_draft_tokens=4)
    assert p.memory["draft_kv_bytes_per_token_per_rank"] == 576 * 2
    assert 1 < p.memory["capacity_gain_vs_dcp1"] < 8


def test_kda_ceiling_unchanged_by_dcp():
    a = plan(model_name="kimi-linear-48b-a3b", tp_size=8, dcp_size=1)
    b = plan(model_name="kimi-linear-48b-a3b", tp_size=8, dcp_size=8)
    # DCP adds no KDA room; the DCP group's kv_b_proj (the MHA form's w_kv) costs dcp 8 a few requests' worth
    assert (0 <= a.memory["kda_max_requests"] - b.memory["kda_max_requests"]
            <= a.memory["kda_max_requests"] // 100)
    assert b.memory["kda_max_requests"] > 0
    assert b.memory["kv_bytes_per_token"] == 7 * 576 * 2


def test_concurrency_with_context_len():
    p = plan(tp_size=8, dcp_size=8, context_len=131072)
    m = p.memory
    assert m["max_concurrency"] == m["kv_virtual_tokens"] // 131072
    assert m["max_concurrency_dcp1"] == (m["kv_virtual_tokens"] // 8) // 131072


def test_weights_that_do_not_fit():
    p = plan(tp_size=1, hardware="h100-8")
    assert [v.code for v in p.violations] == ["weights_fit"]
    assert p.violations[0].message.startswith("weights per rank (")


def test_replicated_q_costs_memory():
    p = plan(model_name="kimi-k3", hardware="gb200-nvl72", tp_size=16, ep_size=16, dcp_size=8, nnodes=4)
    assert p.valid and p.memory["replicated_q_bytes_per_rank"] > 0
    assert p.memory["capacity_gain_vs_dcp1"] < 8


def test_mha_prefill_transient_counts_one_block_query_accumulator_and_wire():
    m = plan(tp_size=8, dcp_size=8).memory
    hk, chunk = 128, m["mha_prefill_chunk_tokens"]     # V3: 128 heads / attn_tp 8 * dcp 8
    row = hk * (128 + 128 + 192) * 2
    block = (1 << 30) // row * row
    want = block + chunk * hk * 192 * 2 + chunk * hk * 129 * (4 + 2) + 2 * chunk * hk * 130 * 2
    assert m["mha_prefill_transient_bytes_per_rank"] == want
    assert plan(tp_size=8, dcp_size=1).memory["mha_prefill_transient_bytes_per_rank"] < want


def test_the_transient_is_taken_at_the_chunk_the_plan_prefills_in():
    small = plan(tp_size=8, dcp_size=8, engine_args=(("--chunked-prefill-size", "2048"),)).memory
    default = plan(tp_size=8, dcp_size=8).memory
    assert small["mha_prefill_chunk_tokens"] == 2048 and default["mha_prefill_chunk_tokens"] == 8192
    assert small["mha_prefill_transient_bytes_per_rank"] < default["mha_prefill_transient_bytes_per_rank"]
    whole = plan(tp_size=8, dcp_size=8, context_len=16384, engine_args=(("--chunked-prefill-size", "-1"),))
    assert whole.memory["mha_prefill_chunk_tokens"] == 16384   # no chunking: the longest prompt is one chunk
