from tests.plan.helpers import codes, plan


def dec(p, k):
    return p.decisions[k].value, p.decisions[k].reason


def test_generic_defaults_follow_the_platform():
    p = plan(tp_size=8, dcp_size=8)  # H200: CUDA, not SM100
    assert dec(p, "dcp_comm_backend")[0] == "a2a"
    assert dec(p, "dcp_replicate_q_proj") == (False, "off by default (no model override applies)")
    assert dec(p, "decode_attention_backend")[0] == "fa3" and dec(p, "page_size")[0] == 1
    assert dec(plan(hardware="cpu", tp_size=8, dcp_size=8), "dcp_comm_backend")[0] == "ag_rs"
    b200 = plan(model_name="kimi-k2", hardware="b200-8", tp_size=8, dcp_size=8)
    assert dec(b200, "dcp_comm_backend") == ("fi_a2a", "SM100 with DCP group inside one node (tp per node "
                                                       "8): FlashInfer's all-to-all")
    assert dec(b200, "decode_attention_backend")[0] == "trtllm_mla" and dec(b200, "page_size")[0] == 64
    cross = plan(model_name="kimi-k2", hardware="b200-8", tp_size=16, dcp_size=16, nnodes=2)
    assert dec(cross, "dcp_comm_backend")[0] == "a2a"
    assert dec(plan(tp_size=8, dcp_size=1), "dcp_comm_backend")[0] == "ag_rs"


def test_hard_errors():
    assert [v.message for v in plan(tp_size=8, dcp_comm_backend="a2a").violations] == [
        "--dcp-comm-backend a2a needs dcp > 1, got dcp (1); use ag_rs or raise --dcp-size"]
    assert codes(plan(tp_size=8, dcp_replicate_q_proj=True, model_name="tiny")) == ["replicate_q_dcp1"]
    p = plan(model_name="tiny", tp_size=8, dcp_size=2, dcp_replicate_q_proj=True)
    assert codes(p) == [] and dec(p, "dcp_replicate_q_proj") == (True, "set by --dcp-replicate-q-proj")
    # SGLang rejects replicate-q with ag_rs whatever the weights (arg_groups/parallel_hook.py)
    p = plan(model_name="tiny", tp_size=8, dcp_size=2, dcp_comm_backend="ag_rs", dcp_replicate_q_proj=True)
    assert codes(p) == ["replicate_q_ag_rs"]


def test_kimi_k3_keeps_a_user_backend():
    k3 = dict(model_name="kimi-k3", hardware="b200-8", tp_size=16, ep_size=16, dcp_size=8, nnodes=2)
    p = plan(**k3, dcp_comm_backend="ag_rs")  # SGLang keeps it and leaves replicated Q off
    assert p.valid and dec(p, "dcp_comm_backend") == ("ag_rs", "set by --dcp-comm-backend")
    assert dec(p, "dcp_replicate_q_proj")[0] is False and p.warnings == []
    assert codes(plan(**k3, dcp_comm_backend="ag_rs", dcp_replicate_q_proj=True)) == ["replicate_q_ag_rs"]
    p = plan(**k3)  # in-node Blackwell group: the generic rule gives fi_a2a, and K3 turns replicated Q on
    assert dec(p, "dcp_comm_backend")[0] == "fi_a2a" and dec(p, "dcp_replicate_q_proj")[0] is True


def test_replicate_q_with_ag_rs_is_rejected():
    p = plan(model_name="kimi-linear-48b-a3b", tp_size=8, dcp_size=8, dcp_comm_backend="ag_rs",
             dcp_replicate_q_proj=True)
    assert [v.message for v in p.violations] == [
        "--dcp-replicate-q-proj does not work with --dcp-comm-backend ag_rs; valid backends: a2a, fi_a2a"]


def test_block_fp8_keeps_replicated_q():
    p = plan(tp_size=8, dcp_size=8, dcp_comm_backend="a2a", dcp_replicate_q_proj=True)
    assert dec(p, "dcp_replicate_q_proj") == (True, "set by --dcp-replicate-q-proj; fp8 weights: the "
                                                    "block-FP8 q_b_proj is gathered and w_kc dequantized")
    assert p.valid


def test_kimi_k3_overrides():
    p = plan(model_name="kimi-k3", hardware="gb200-nvl72", tp_size=16, ep_size=16, dcp_size=8, nnodes=4)
    assert p.valid and dec(p, "dcp_comm_backend")[0] == "fi_a2a"
    assert dec(p, "dcp_replicate_q_proj")[0] is True
    assert dec(p, "decode_attention_backend")[0] == "cutedsl_mla"
    assert dec(p, "symmetric_memory")[0] is False
    p = plan(model_name="kimi-k3", hardware="gb200-nvl72", tp_size=16, ep_size=16, dcp_size=8, nnodes=4,
             dcp_replicate_q_proj=False)
    assert p.valid and dec(p, "dcp_replicate_q_proj") == (False, "--no-dcp-replicate-q-proj")
    p = plan(model_name="kimi-k3", hardware="gb200-nvl72", tp_size=16, ep_size=16, dcp_size=8, nnodes=4,
             attention_backend="tokenspeed_mla")
    assert dec(p, "kv_cache_dtype") == ("fp8_e4m3", "tokenspeed_mla forces fp8_e4m3 KV")
    assert dec(p, "decode_attention_backend")[0] == "cutedsl_mla"
    p = plan(model_name="kimi-k3", hardware="gb200-nvl72", tp_size=16, ep_size=16, dcp_size=8, nnodes=4,
             attention_backend="flashinfer")
    assert codes(p) == ["k3_decode_backend"]
    p = plan(model_name="kimi-k3", hardware="h200-8", tp_size=16, ep_size=16, dcp_size=8, nnodes=2)
    assert codes(p) == ["cutedsl_sm100"]


def test_fi_a2a_hardware_rules():
    p = plan(model_name="tiny", hardware="h200-8", tp_size=8, dcp_size=8, dcp_comm_backend="fi_a2a")
    assert codes(p) == ["fi_a2a_hardware"]
    assert p.violations[0].message.startswith("fi_a2a needs CUDA SM100, got NVIDIA H200 (device cuda, SM 90)")


def test_runtime_traps_reported_at_plan_time():
    p = plan(model_name="kimi-k2", hardware="b200-8", tp_size=8, dcp_size=8, speculative_algorithm="EAGLE")
    assert codes(p) == ["trtllm_dcp_spec"]
    p = plan(tp_size=8, dcp_size=8, attention_backend="flashmla", kv_cache_dtype="fp8_e4m3")
    assert codes(p) == ["flashmla_fp8_dcp"] and dec(p, "page_size")[0] == 64
    p = plan(tp_size=8, dcp_size=8, attention_backend="flashmla", page_size=16)
    assert dec(p, "page_size")[0] == 64 and "replaced by 64" in p.warnings[0]
    assert codes(plan(tp_size=8, dcp_size=8, enable_prefill_cp=True)) == ["dcp_prefill_cp"]
    assert codes(plan(tp_size=8, dcp_size=1, enable_prefill_cp=True)) == ["prefill_cp_strategy"]


def test_fi_a2a_fabric_counts_tp_per_node_as_sglang_does():
    p = plan(model_name="kimi-k2", hardware="b200-8", tp_size=16, dcp_size=16, nnodes=2,
             dcp_comm_backend="fi_a2a")
    assert [v.message for v in p.violations] == [
        "fi_a2a needs an MNNVL fabric or a DCP group inside one node: tp per node (8) = tp (16) // (nnodes "
        "(2) // pp (1)) is not a multiple of dcp (16) and b200-8 has no MNNVL"]


def test_served_page_size_follows_the_measured_decode_table():
    # H200, 16 kernel heads: the table measures page 64 only (FlashMLA's page), so the runtime serves page 64
    p = plan(tp_size=8)
    assert p.decisions["page_size"].value == 1                      # SGLang's (fa3 takes any page)
    served = p.decisions["served_page_size"]
    assert served.value == 64
    assert served.reason.startswith("the bundled runtime's measured decode table has cells for 16 kernel "
                                    "heads, bf16 KV on NVIDIA H200 at page 64")
    assert "page 64" in p.decisions["local_attention_backend"].reason
    assert plan(tp_size=8, page_size=32).decisions["served_page_size"].value == 32      # the user's page wins
    assert plan(tp_size=8, hardware="cpu").decisions["served_page_size"].value == 1     # no table on CPU
    b200 = plan(tp_size=8, hardware="b200-8").decisions                               # trtllm_mla fixes 64
    assert b200["served_page_size"].value == b200["page_size"].value
    assert b200["served_page_size"].reason.startswith("the plan's page_size")
