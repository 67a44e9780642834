"""Property tests: whatever the flags, saved plan or config.json, plan/export/recommend exit 0 or 2, never
crash.

In-process (CliRunner with catch_exceptions=False, so any exception other than a UserError fails the test),
derandomized and small, so the file runs in seconds on a 2-core CI machine.
"""
import json
import tempfile
from pathlib import Path

import yaml
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dcpctl.cli.main import cli
from dcpctl.cli.options import PLAN_KEYS
from dcpctl.plan import presets
from dcpctl.plan import request as R
from dcpctl.plan import vllm_backends
from dcpctl.plan.vllm_args import ALIASES as VLLM_ALIASES

FAST = settings(max_examples=60, deadline=None, derandomize=True,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
WORK = Path(tempfile.mkdtemp(prefix="dcpctl-props-"))

INTS = st.sampled_from([-1, 0, 1, 2, 3, 4, 8, 16, 64, 10**13])
WORDS = st.sampled_from(["", "x", "auto", "int3", "7", "-1", "1e9", "nan", "../nope", "EAGLE", "a2a"])
ANY_VALUE = st.recursive(
    st.none() | st.booleans() | INTS | st.floats(allow_nan=True) | WORDS,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(WORDS, inner, max_size=3), max_leaves=6)


def _text_of(v):
    return str(v).lower() if isinstance(v, bool) else str(v)


FLAG_VALUES = {
    "tp_size": INTS, "dp_size": INTS, "dcp_size": INTS, "ep_size": INTS, "pp_size": INTS, "nnodes": INTS,
    "attn_dp_size": INTS, "gpus_per_node": INTS, "page_size": INTS, "context_len": INTS,
    "max_running_requests": INTS, "speculative_num_draft_tokens": INTS, "disaggregation_peer_dcp_size": INTS,
    "speculative_num_steps": INTS, "speculative_eagle_topk": INTS,
    "disaggregation_peer_page_size": INTS,
    "mem_fraction_static": st.sampled_from(["0.5", "0", "1.5", "-1", "nan", "x"]),
    "kda_state_fraction": st.sampled_from(["0.1", "0", "2", "x"]),
    "hardware": st.sampled_from(["h200-8", "b200-8", "gb200-nvl72", "cpu", "h900", "nope.yaml"]),
    "model": st.sampled_from(["deepseek-v3.1", "kimi-k3", "kimi-linear-48b-a3b", "tiny", "gpt-9"]),
    "preset": st.sampled_from(presets.names("deployments") + ["nope"]),
    "model_path": st.sampled_from(["./DeepSeek-V3.1", "/nonexistent", "."]),
    "dcp_comm_backend": st.sampled_from(R.COMM_BACKENDS + ("nccl",)),
    "attention_backend": st.sampled_from(R.DECODE_ATTENTION_BACKENDS + vllm_backends.NAMES),
    "decode_attention_backend": st.sampled_from(R.DECODE_ATTENTION_BACKENDS),
    "kv_cache_dtype": st.sampled_from(R.KV_DTYPES + ("int3",)),
    "speculative_algorithm": st.sampled_from(R.SPEC_ALGORITHMS),
    "speculative_draft_model_path": st.sampled_from(["/nonexistent", "."]),
    "disaggregation_mode": st.sampled_from(R.PD_MODES),
    "disaggregation_transfer_backend": st.sampled_from(R.PD_BACKENDS),
    "disaggregation_peer_kv_cache_dtype": st.sampled_from(R.KV_DTYPES),
    "hicache_storage_backend": st.sampled_from(["file", "mooncake", ""]),
    # --engine vllm and vLLM's names (cli/vllm_options.py)
    "engine": st.sampled_from(["vllm", "vllm", "sglang", "trt"]),
    "prefill_context_parallel_size": INTS, "cp_kv_cache_interleave_size": INTS, "block_size": INTS,
    "max_model_len": INTS, "max_num_seqs": INTS,
    "gpu_memory_utilization": st.sampled_from(["0.5", "0", "1.5", "nan", "x"]),
    **{k: INTS for k in VLLM_ALIASES},
    "fp8_gemm": st.sampled_from(["w8a16", "w8a8", "fp4"]),
    "blas": st.sampled_from(["cublaslt", "keep", "rocblas"]), "cublaslt_workspace_kib": INTS,
    "dist_timeout": INTS, "attention_table": st.sampled_from(["/nonexistent.json", "."]),
    "mla_configs": st.sampled_from(["/nonexistent"]), "gemm16_table": st.sampled_from(["/nonexistent", "."]),
}
FLAGS = {"enable_dp_attention": "--enable-dp-attention",
         "enable_hierarchical_cache": "--enable-hierarchical-cache",
         "enable_prefill_cp": "--enable-prefill-cp", "enable_expert_parallel": "-ep"}
PAIRS = {"dcp_replicate_q_proj": ["--dcp-replicate-q-proj", "--no-dcp-replicate-q-proj"],
         "dcp_q_replicate": ["--dcp-q-replicate", "--no-dcp-q-replicate"]}


@st.composite
def plan_argv(draw):
    keys = draw(st.lists(st.sampled_from(sorted(PLAN_KEYS)), max_size=7, unique=True))
    argv = []
    for k in keys:
        if k in FLAGS:
            argv.append(FLAGS[k])
        elif k in PAIRS:
            argv.append(draw(st.sampled_from(PAIRS[k])))
        elif k in VLLM_ALIASES:
            argv += [VLLM_ALIASES[k][0], _text_of(draw(FLAG_VALUES[k]))]
        else:
            argv += [f"--{k.replace('_', '-')}", _text_of(draw(FLAG_VALUES[k]))]
    return argv


def assert_clean_exit(r, what):
    assert r.exit_code in (0, 2), (what, r.exit_code, r.output[-800:])
    assert "internal error" not in r.output and "Traceback" not in r.output, (what, r.output[-800:])


def invoke(*args):
    return CliRunner().invoke(cli, [str(a) for a in args], catch_exceptions=False)


@FAST
@given(argv=plan_argv())
def test_plan_flags_never_crash(argv):
    assert_clean_exit(invoke("plan", *argv, "--format", "json"), argv)


@settings(FAST, max_examples=25)
@given(argv=plan_argv())
def test_export_and_recommend_flags_never_crash(argv):
    assert_clean_exit(invoke("export", "sglang", *argv), argv)
    assert_clean_exit(invoke("recommend", *argv, "--context-len", "4096", "--concurrency", "4"), argv)


def _typed(value):
    try:
        return float(value) if isinstance(value, str) and "." in value else value
    except ValueError:
        return value


@st.composite
def saved_requests(draw):
    """Mostly well-typed values (so the plan goes deep), some of any type, a few unknown keys."""
    keys = draw(st.lists(st.sampled_from(sorted(PLAN_KEYS) + ["description", "bogus"]), max_size=7,
                         unique=True))
    req = {}
    for k in keys:
        typed = (st.booleans()
                 if k in FLAGS or k == "dcp_replicate_q_proj" else FLAG_VALUES.get(k, WORDS).map(_typed))
        req[k] = draw(st.one_of(typed, typed, ANY_VALUE))
    return req


saved_documents = st.one_of(
    st.builds(lambda req: {"request": req}, saved_requests()),
    st.builds(lambda req, extra: {"request": req, **extra}, saved_requests(),
              st.dictionaries(st.sampled_from(["hardware", "valid", "topology"]), ANY_VALUE, max_size=2)),
    ANY_VALUE,
)


@FAST
@given(doc=saved_documents)
def test_saved_plan_documents_never_crash(doc):
    f = WORK / "plan.yaml"
    f.write_text(yaml.safe_dump(doc))
    assert_clean_exit(invoke("plan", f, "--format", "json"), doc)
    assert_clean_exit(invoke("export", "sglang", f), doc)


@FAST
@given(text=st.sampled_from(["request: {tp_size: 8", "request:\n  - a\n b", "{{",
                             "request: !!python/object x", "\t",
                             "request: {tp_size: 8}\nrequest: {tp_size: 4}", "---\n---\n"]))
def test_broken_yaml_never_crashes(text):
    f = WORK / "broken.yaml"
    f.write_text(text)
    assert_clean_exit(invoke("plan", f), text)
    assert_clean_exit(invoke("plan", "--hardware", f), text)


TINY = presets.get("models", "tiny")["config"]


@FAST
@given(changes=st.dictionaries(st.sampled_from(sorted(TINY)
                                               + ["text_config", "quantization_config", "layer_types",
                                                  "linear_attn_config"]), ANY_VALUE, max_size=3))
def test_config_json_never_crashes(changes):
    d = WORK / "ckpt"
    d.mkdir(exist_ok=True)
    (d / "config.json").write_text(json.dumps({**TINY, **changes}))
    assert_clean_exit(invoke("plan", "--model-path", d, "--format", "json"), changes)


H200 = presets.hardware_profiles()["h200-8"]


@FAST
@given(changes=st.dictionaries(st.sampled_from(sorted(H200) + ["bogus"]), ANY_VALUE, max_size=3),
       nest=st.booleans())
def test_hardware_yaml_never_crashes(changes, nest):
    f = WORK / "hw.yaml"
    hw = {**H200, **changes}
    f.write_text(yaml.safe_dump({"hardware": hw} if nest else hw))
    assert_clean_exit(invoke("plan", "--hardware", f, "--tp-size", "8", "--dcp-size", "8", "--format",
                             "json"), hw)
