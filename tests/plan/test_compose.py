from tests.plan.helpers import codes, plan


def test_eagle_parameters_as_sglang_chooses_them():
    p = plan(tp_size=8, dcp_size=8, speculative_algorithm="EAGLE")  # SGLang picks steps 3, topk 1, 4 tokens
    assert p.valid and p.decisions["speculative_num_draft_tokens"].value == 4
    assert (p.request.speculative_num_draft_tokens == 4
            and p.compositions["speculative"]["num_draft_tokens"] == 4)
    # all three, for exports
    assert (p.request.speculative_num_steps, p.request.speculative_eagle_topk) == (3, 1)
    p = plan(tp_size=8, dcp_size=8, speculative_algorithm="NEXTN", speculative_num_draft_tokens=4)
    assert [v.message for v in p.violations] == [
        "--speculative-algorithm NEXTN: give --speculative-num-steps with --speculative-num-draft-tokens/"
        "--speculative-eagle-topk, or none of them (SGLang then chooses steps 3, topk 1, draft tokens 4)"]
    p = plan(tp_size=8, dcp_size=8, speculative_algorithm="EAGLE", speculative_num_steps=3)
    assert [v.message for v in p.violations] == [
        "--speculative-algorithm EAGLE with --speculative-num-steps 3 also needs --speculative-eagle-topk "
        "(SGLang 0.5.23 fails without it)"]
    p = plan(tp_size=8, dcp_size=8, speculative_algorithm="EAGLE", speculative_num_steps=2,
             speculative_eagle_topk=1, speculative_num_draft_tokens=8)
    assert p.valid and p.decisions["speculative_num_draft_tokens"].value == 3  # topk 1: steps + 1
    p = plan(hardware="b200-8", tp_size=8, speculative_algorithm="EAGLE", speculative_num_steps=4,
             speculative_eagle_topk=2, speculative_num_draft_tokens=8)  # trtllm_mla at page 64
    assert codes(p) == ["spec_tree_page"]


def test_spec_required_inputs():
    # DeepSeek: the target drafts
    assert plan(tp_size=8, dcp_size=8, speculative_algorithm="STANDALONE").valid
    k3 = dict(model_name="kimi-k3", hardware="gb200-nvl72", tp_size=16, ep_size=16, dcp_size=8, nnodes=4)
    assert codes(plan(**k3, speculative_algorithm="STANDALONE")) == ["spec_draft_model"]
    for algo in ("DFLASH", "DSPARK"):
        p = plan(tp_size=8, speculative_algorithm=algo)
        assert [v.message for v in p.violations] == [f"--speculative-algorithm {algo} needs "
                                                     "--speculative-draft-model-path"]
    assert codes(plan(tp_size=8, speculative_algorithm="UNO")) == ["spec_uno"]
    ngram = plan(tp_size=8, dcp_size=8, speculative_algorithm="NGRAM")
    assert ngram.valid and ngram.decisions["speculative_num_draft_tokens"].value == 12
    p = plan(hardware="b200-8", tp_size=8, speculative_algorithm="NGRAM")
    assert [v.message for v in p.violations] == [
        "NGRAM drafts a tree (topk 10 > 1), which trtllm_mla cannot verify at page_size (64) > 1; use page "
        "size 1, topk 1 or flashinfer/fa3/triton"]
    p = plan(tp_size=8, speculative_num_draft_tokens=4)
    assert p.valid and p.warnings == ["--speculative-num-draft-tokens ignored: no --speculative-algorithm"]


def test_pd_sizes():
    ok = plan(tp_size=8, dcp_size=8, disaggregation_mode="decode", disaggregation_peer_dcp_size=1)
    assert ok.valid and "token relayout" in ok.compositions["disaggregation"]["transfer"]
    same = plan(tp_size=8, dcp_size=8, disaggregation_mode="prefill", disaggregation_peer_dcp_size=8)
    assert same.compositions["disaggregation"]["transfer"] == "page path with matching DCP ranks"
    bad = plan(tp_size=8, dcp_size=4, disaggregation_mode="decode", disaggregation_peer_dcp_size=2)
    assert [v.message for v in bad.violations] == [
        "prefill dcp (2) -> decode dcp (4) is not supported: use equal sizes or dcp 1 prefill; "
        "valid prefill sizes: [1, 4]"]


def test_pd_page_and_dtype_match_even_without_dcp():
    p = plan(tp_size=8, dcp_size=1, disaggregation_mode="prefill", disaggregation_peer_page_size=64)
    assert codes(p) == ["pd_page_size"]


def test_pd_matching_rules():
    p = plan(tp_size=8, dcp_size=8, disaggregation_mode="decode", disaggregation_peer_dcp_size=1,
             disaggregation_transfer_backend="fake", disaggregation_peer_page_size=64,
             disaggregation_peer_kv_cache_dtype="fp8_e4m3", enable_hierarchical_cache=True)
    assert codes(p) == ["pd_page_size", "pd_kv_dtype", "pd_decode_hicache"]  # fake runs on the decode side
    assert "--disaggregation-transfer-backend fake moves no KV: a decode-side test setup" in p.warnings
    # SGLang's decode side has no radix cache, with or without DCP
    assert codes(plan(tp_size=8, dcp_size=1, disaggregation_mode="decode",
                      enable_hierarchical_cache=True)) == ["pd_decode_hicache"]
    p = plan(tp_size=8, disaggregation_mode="prefill", disaggregation_transfer_backend="fake")
    assert [v.message for v in p.violations] == [
        "--disaggregation-transfer-backend fake runs only on the decode side (a test backend that moves no "
        "KV); use mooncake or nixl for prefill"]


def test_hicache_rules():
    assert plan(tp_size=8, dcp_size=8, enable_hierarchical_cache=True).valid
    p = plan(tp_size=8, dcp_size=8, enable_hierarchical_cache=True, hicache_storage_backend="mooncake",
             speculative_algorithm="EAGLE")
    assert codes(p) == ["hicache_spec"]  # L3 storage with DCP: SGLang shards it per DCP rank
    assert p.compositions["hicache"]["l3"] == "mooncake: sharded per DCP rank"
    assert codes(plan(tp_size=8, dcp_size=1, enable_hierarchical_cache=True,
                      hicache_storage_backend="x")) == []
    p = plan(tp_size=8, dcp_size=8, hicache_storage_backend="file")  # SGLang ignores it without HiCache
    assert p.valid and p.warnings == ["--hicache-storage-backend file ignored: no "
                                      "--enable-hierarchical-cache"]
    # Kimi hybrids keep MLA host pools (SGLang counts them as MLA models): allowed
    assert codes(plan(model_name="kimi-linear-48b-a3b", tp_size=8, dcp_size=8,
                      enable_hierarchical_cache=True)) == []


def test_context_len_above_the_model():
    p = plan(tp_size=8, dcp_size=8, context_len=10_000_000_000_000)
    assert "context_len_model" in codes(p)
    assert [v.message for v in p.violations if v.code == "context_len_model"] == [
        "--context-length (10000000000000) > the model's max_position_embeddings (163840); SGLang refuses it "
        "unless SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1"]
    assert "context_len_model" not in codes(plan(tp_size=8, dcp_size=8, context_len=163840))


def test_speculative_with_attention_dp():
    dpa = dict(tp_size=8, dp_size=2, enable_dp_attention=True, dcp_size=4)
    p = plan(**dpa, speculative_algorithm="NGRAM")
    assert [v.message for v in p.violations] == [
        "--speculative-algorithm NGRAM does not support attention DP (attn_dp 2) in SGLang; use EAGLE/NEXTN "
        "or attn_dp 1"]
    assert codes(plan(**dpa, speculative_algorithm="STANDALONE")) == ["spec_attention_dp"]
    assert codes(plan(**dpa, speculative_algorithm="EAGLE")) == []


def test_hicache_with_dcp_takes_dspark_only():
    p = plan(tp_size=8, dcp_size=8, enable_hierarchical_cache=True, speculative_algorithm="NEXTN")
    assert [v.message for v in p.violations] == [
        "HiCache with dcp (8) > 1 supports only DSPARK speculative decoding, got --speculative-algorithm "
        "NEXTN"]
    # DSPARK itself is fine with HiCache; it needs its draft
    assert codes(plan(tp_size=8, dcp_size=8, enable_hierarchical_cache=True,
                      speculative_algorithm="DSPARK")) == ["spec_draft_model"]
