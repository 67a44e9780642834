"""`dcpctl generate` / `dcpctl launch`: checks made before any rank starts, and text output."""
import json
import shutil
import subprocess
import sys

import pytest
from click.testing import CliRunner

from dcpctl.cli.main import cli

no_cuda = pytest.mark.skipif(__import__("torch").cuda.is_available(), reason="this machine has CUDA")


def run(*args):
    return CliRunner().invoke(cli, [str(a) for a in args], catch_exceptions=False,
                              env={"DCPCTL_API_KEY": None})


def assert_user_error(r, text):
    assert r.exit_code == 2, r.output
    assert "Traceback" not in r.output
    assert text in r.output, r.output


@pytest.fixture(scope="module")
def no_tokenizer(tmp_path_factory):
    """The tiny checkpoint without its tokenizer files (config, generation config, weights)."""
    from dcpctl.runtime.tiny import ensure_tiny_model
    src, d = ensure_tiny_model(), tmp_path_factory.mktemp("no-tokenizer")
    for name in ("config.json", "generation_config.json", "model.safetensors"):
        shutil.copy(src / name, d / name)
    return d


def test_generate_prompt_ids_need_no_tokenizer(no_tokenizer):
    p = subprocess.run([sys.executable, "-m", "dcpctl.cli.main", "generate", "--model-path",
                        str(no_tokenizer), "--prompt-ids", "5,6,7", "--max-new-tokens", "3", "--format",
                        "json"],
                       capture_output=True, text=True, timeout=180)
    assert p.returncode == 0, p.stderr[-2000:]
    out = json.loads(p.stdout)["outputs"][0]
    assert out["prompt_ids"] == [5, 6, 7] and len(out["output_ids"]) == 3 and "text" not in out
    assert_user_error(run("generate", "--model-path", no_tokenizer, "--prompt", "hi"),
                      "--prompt needs a tokenizer")


def test_missing_weights_are_named_before_the_tokenizer(tmp_path):
    from dcpctl.runtime.tiny import ensure_tiny_model
    shutil.copy(ensure_tiny_model() / "config.json", tmp_path / "config.json")
    assert_user_error(run("generate", "--model-path", tmp_path, "--prompt", "hi"),
                      "no *.safetensors weights in")


@pytest.mark.parametrize("ids", ["1,,2", "1,2,", ",", " "])
def test_prompt_ids_with_empty_items(ids):
    r = run("generate", "--prompt-ids", ids)
    assert r.exit_code == 2 and "--prompt-ids" in r.output and "Traceback" not in r.output, r.output


@pytest.mark.parametrize("size", ["0", "-5"])
def test_chunked_prefill_size_is_positive_or_minus_one(size):
    for cmd in (["generate", "--prompt-ids", "1"], ["launch", "--dry-run"]):
        assert_user_error(run(*cmd, "--chunked-prefill-size", size),
                          "--chunked-prefill-size must be a positive token count or -1 (no chunking), got "
                          f"{size}")


@no_cuda
def test_cuda_without_cuda_fails_up_front():
    assert_user_error(run("generate", "--device", "cuda", "--prompt-ids", "1"),
                      "--device cuda needs 2 CUDA GPU(s)")
    assert_user_error(run("launch", "--device", "cuda", "--port", "0"), "--device cuda needs 2 CUDA GPU(s)")
    # a dry run starts nothing: no GPU needed
    assert run("launch", "--device", "cuda", "--dry-run").exit_code == 0


def test_empty_api_key_is_refused():
    assert_user_error(run("launch", "--api-key", ""), "--api-key (or $DCPCTL_API_KEY) is empty")
    assert_user_error(run("launch", "--api-key", "  ", "--host", "0.0.0.0"), "is empty")


def test_unauthenticated_public_server_warns():
    r = run("launch", "--host", "0.0.0.0", "--allow-unauthenticated", "--nnodes", "1", "--node-rank", "1")
    assert_user_error(r, "--node-rank (1) must be < nnodes (1)")  # stops before anything starts
    assert "warning: serving on 0.0.0.0 without an API key" in r.output


def test_replicated_q_on_float32_is_kept_as_sglang_keeps_it():
    # SGLang 0.5.23 replicates Q whatever the weights' dtype: generate passes it on, no note
    r = run("generate", "--dcp-replicate-q-proj", "--prompt-ids", "1", "--max-new-tokens", "3000")
    assert_user_error(r, "exceeds the model's max_position_embeddings")
    assert "--dcp-replicate-q-proj ignored" not in r.output


def test_curl_line_expands_the_key_variable(capsys):
    from dcpctl.cli.launch import _print_ready
    _print_ready("http://127.0.0.1:1", {"served_model_name": "m"}, True, "s")
    out = capsys.readouterr().out
    assert '-H "Authorization: Bearer $DCPCTL_API_KEY"' in out and "'Authorization" not in out


def test_model_text_is_escaped_for_the_terminal():
    from dcpctl.cli.generate import printable
    assert printable("a\x00b\x1b[31mc\u200bd\n\té") == "a\\x00b\\x1b[31mc\\u200bd\n\té"


def test_runtime_limits_are_refused_before_the_ranks(tmp_path):
    from dcpctl.runtime.tiny import ensure_tiny_model
    from dcpctl.runtime.tiny_kimi import write_tiny_kimi_model
    kimi = write_tiny_kimi_model(tmp_path / "kimi")
    r = run("generate", "--model-path", kimi, "--disaggregation-mode", "decode", "--prompt-ids", "1,2")
    assert_user_error(r, "the bundled runtime's PD transfer moves MLA KV only, not the KDA state")
    tiny = ensure_tiny_model()
    r = run("generate", "--prompt-ids", "1,2", "--enable-hierarchical-cache", "--speculative-algorithm",
            "STANDALONE", "--speculative-draft-model-path", tiny, "--speculative-num-steps", "1",
            "--speculative-eagle-topk", "1", "--dcp-size", "1")
    assert_user_error(r, "does not run the HiCache host tier together with speculative decoding")


def test_the_decode_graph_flag_is_taken_where_its_ambiguous_prefix_is_refused():
    # the refusing hidden option of --cuda-graph-max-bs must not see --cuda-graph-max-bs-decode's value
    ok = run("launch", "--cuda-graph-max-bs-decode", 8, "--dry-run")
    assert ok.exit_code == 0, ok.output
    bad = run("launch", "--cuda-graph-max-bs", 8, "--dry-run")
    assert bad.exit_code == 2 and "--cuda-graph-max-bs is ambiguous" in bad.output
