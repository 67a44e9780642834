from tests.plan.helpers import codes, plan


def dec(p, k):
    return p.decisions[k].value, p.decisions[k].reason


def test_generic_defaults():
    p = plan(tp_size=8, dcp_size=8)
    assert dec(p, "dcp_comm_backend")[0] == "ag_rs"
    assert dec(p, "dcp_replicate_q_proj") == (False, "generic default")


def test_hard_errors():
    assert [v.message for v in plan(tp_size=8, dcp_comm_backend="a2a").violations] == [
        "--dcp-comm-backend a2a needs dcp > 1, got dcp (1); use ag_rs or raise --dcp-size"]
    assert codes(plan(tp_size=8, dcp_replicate_q_proj=True, model_name="tiny")) == ["replicate_q_dcp1"]
    p = plan(model_name="tiny", tp_size=8, dcp_size=2, dcp_replicate_q_proj=True)
    assert codes(p) == []  # tiny is float32: not replicable, so replicate-q falls back with a warning
    assert "cannot be replicated" in p.warnings[0]


def test_replicate_q_needs_a2a():
    p = plan(model_name="kimi-k3", hardware="h200-8", tp_size=16, ep_size=16, dcp_size=8, nnodes=2,
             dcp_comm_backend="ag_rs", dcp_replicate_q_proj=True)
    # Kimi K3 forces a2a (no MNNVL) over the user's ag_rs and warns
    assert dec(p, "dcp_comm_backend")[0] == "a2a"
    assert p.warnings == ["Kimi K3 overrides --dcp-comm-backend ag_rs with a2a (no MNNVL fabric)"]
    assert p.valid


def test_replicate_q_with_ag_rs_is_rejected():
    p = plan(model_name="kimi-linear-48b-a3b", tp_size=8, dcp_size=8, dcp_comm_backend="ag_rs",
             dcp_replicate_q_proj=True)
    assert [v.message for v in p.violations] == [
        "--dcp-replicate-q-proj does not work with --dcp-comm-backend ag_rs; valid backends: a2a, fi_a2a"]


def test_quantized_falls_back_to_query_allgather():
    p = plan(tp_size=8, dcp_size=8, dcp_comm_backend="a2a", dcp_replicate_q_proj=True)
    assert dec(p, "dcp_replicate_q_proj")[0] is False
    assert "quantized (fp8)" in dec(p, "dcp_replicate_q_proj")[1]
    assert p.valid


def test_kimi_k3_overrides():
    p = plan(model_name="kimi-k3", hardware="gb200-nvl72", tp_size=8, dcp_size=8, nnodes=2)
    assert dec(p, "dcp_comm_backend")[0] == "fi_a2a"
    assert dec(p, "dcp_replicate_q_proj")[0] is True
    assert dec(p, "decode_attention_backend")[0] == "cutedsl_mla"
    assert dec(p, "symmetric_memory")[0] is False
    p = plan(model_name="kimi-k3", hardware="gb200-nvl72", tp_size=8, dcp_size=8, nnodes=2,
             dcp_replicate_q_proj=False)
    assert "fi_a2a_replicate_q" in codes(p)
    p = plan(model_name="kimi-k3", tp_size=16, dcp_size=8, nnodes=2, attention_backend="tokenspeed_mla")
    assert dec(p, "kv_cache_dtype") == ("fp8_e4m3", "tokenspeed_mla forces fp8 KV")


def test_fi_a2a_hardware_rules():
    p = plan(model_name="tiny", hardware="h200-8", tp_size=8, dcp_size=8, dcp_comm_backend="fi_a2a")
    assert codes(p) == ["fi_a2a_hardware", "fi_a2a_replicate_q"]
    assert p.violations[0].message.startswith("fi_a2a needs CUDA SM100, got NVIDIA H200 (device cuda, SM 90)")
