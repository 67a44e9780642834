from tests.plan.helpers import codes, plan


def test_spec_needs_draft_tokens():
    p = plan(tp_size=8, dcp_size=8, speculative_algorithm="EAGLE")
    assert [v.message for v in p.violations] == [
        "--speculative-algorithm EAGLE needs --speculative-num-draft-tokens >= 1, got None"]
    assert codes(plan(tp_size=8, dcp_size=8, speculative_algorithm="STANDALONE",
                      speculative_num_draft_tokens=4)) == ["spec_draft_model"]


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
    assert codes(p) == ["pd_backend", "pd_page_size", "pd_kv_dtype", "pd_decode_hicache"]


def test_hicache_rules():
    assert plan(tp_size=8, dcp_size=8, enable_hierarchical_cache=True).valid
    p = plan(tp_size=8, dcp_size=8, enable_hierarchical_cache=True, hicache_storage_backend="mooncake",
             speculative_algorithm="EAGLE", speculative_num_draft_tokens=2)
    assert codes(p) == ["hicache_l3", "hicache_spec"]
    assert codes(plan(tp_size=8, dcp_size=1, enable_hierarchical_cache=True, hicache_storage_backend="x")) == []
    # Kimi hybrids keep MLA host pools (SGLang counts them as MLA models): allowed
    assert codes(plan(model_name="kimi-linear-48b-a3b", tp_size=8, dcp_size=8, enable_hierarchical_cache=True)) == []
