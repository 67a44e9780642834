"""LaunchConfig: the YAML form round-trips, every bad key is named in one sentence, defaults live once."""
import dataclasses

import pytest
import yaml

from dcpctl.contract.fields import LaunchConfigError
from dcpctl.contract.launch_config import DEFAULT_CHUNKED_PREFILL, DEFAULT_SERVE_MAX_RUNNING, LaunchConfig
from dcpctl.contract.serve import ServeOptions, serve_options
from dcpctl.launch.config import render_launch_config
from tests.plan.helpers import plan


def _plain(**kv):
    blocks = lambda n: [list(range(i, i + n)) for i in range(0, 2, n)]  # noqa: E731
    return {"version": 1, "model": {"path": "", "dtype": "float32"}, "device": "cpu", "dist_backend": "gloo",
            "world_size": 2, "topology": {"tp_size": 2, "attn_tp_size": 2, "attn_dp_size": 1, "dcp_size": 2,
                                          "ep_size": 1, "pp_size": 1},
            "groups": {"tp": blocks(2), "attn_tp": blocks(2), "attn_dp": blocks(2), "dcp": blocks(2),
                       "ep": blocks(1)},
            "decisions": {"dcp_comm_backend": "a2a", "dcp_replicate_q_proj": False, "lse_base": "e"},
            "kv": {"page_size": 2, "capacity_tokens": 64, **kv}}


def test_render_round_trips_through_yaml(tmp_path):
    p = plan("tiny", "cpu", tp_size=2, dcp_size=2, dcp_comm_backend="a2a", max_running_requests=5)
    cfg = render_launch_config(p, tmp_path, "float32", "cpu", 256, 64)
    text = yaml.safe_dump(cfg.to_dict(), sort_keys=False)
    again = LaunchConfig.from_dict(yaml.safe_load(text))
    assert dataclasses.replace(again, limits=None) == cfg
    assert list(cfg.to_dict())[:3] == ["version", "model", "device"] and "limits" not in cfg.to_dict()
    assert cfg.kv.max_running_requests == 5 and cfg.decisions.attention_path == "auto"


@pytest.mark.parametrize("mutate,message", [
    (lambda d: d["kv"].update(page_size="2"), "launch config key kv.page_size must be an integer, got '2'"),
    (lambda d: d["kv"].update(pages=2),
     "launch config key kv.pages is unknown; valid: page_size, capacity_tokens"),
    (lambda d: d["decisions"].update(dcp_comm_backend="fi_a2a"),
     "launch config key decisions.dcp_comm_backend is 'fi_a2a'; valid: ag_rs, a2a"),
    (lambda d: d.pop("topology"), "launch config has no topology"),
    (lambda d: d["groups"]["dcp"][0].append("x"),
     "launch config key groups.dcp[0][2] must be an integer, got 'x'"),
    (lambda d: d["kv"].update(chunked_prefill_size=0),
     "kv.chunked_prefill_size must be a positive token count or -1"),
    (lambda d: d.update(version=2), "launch config key version is 2; this dcpctl reads version 1"),
    (lambda d: d.update(hicache={"host_pages": 4},
                        speculative={"algorithm": "STANDALONE", "draft_model_path": "d",
                                     "num_draft_tokens": 2}),
     "does not run the HiCache host tier together with speculative decoding"),
])
def test_bad_key_is_named(mutate, message):
    d = _plain()
    mutate(d)
    with pytest.raises(LaunchConfigError,
                       match=message.replace("(", r"\(").replace(")", r"\)").replace("[", r"\[")
                       .replace("]", r"\]")):
        LaunchConfig.from_dict(d)


def test_defaults_live_in_the_dataclass():
    cfg = LaunchConfig.from_dict(_plain())
    assert cfg.kv.chunked_prefill_size == DEFAULT_CHUNKED_PREFILL and cfg.kv.max_running_requests is None
    assert cfg.for_serving().kv.max_running_requests == DEFAULT_SERVE_MAX_RUNNING
    assert cfg.for_serving(3).kv.max_running_requests == 3
    assert LaunchConfig.from_dict(_plain(max_running_requests=7)).for_serving().kv.max_running_requests == 7
    assert cfg.limits is not None and cfg.limits.eos_token_ids == () and cfg.limits.vocab_size is None


def test_limits_come_from_the_checkpoint(tmp_path):
    (tmp_path / "config.json").write_text(  # a wrapper's text_config, parsed by the one config.json parser
        '{"text_config": {"model_type": "deepseek_v3", "vocab_size": 300, "hidden_size": 64, '
        '"num_hidden_layers": 1, "num_attention_heads": 2, "kv_lora_rank": 16}, "eos_token_id": 2}')
    d = _plain()
    d["model"]["path"] = str(tmp_path)
    lim = LaunchConfig.from_dict(d).limits
    assert (lim.vocab_size, lim.max_position_embeddings, lim.eos_token_ids) == (300, 4096, (2,))
    (tmp_path / "generation_config.json").write_text('{"eos_token_id": [5, 6]}')
    assert LaunchConfig.from_dict(d).limits.eos_token_ids == (5, 6)


def test_serve_options():
    assert serve_options({"port": 8000, "api_key": None}) == ServeOptions(port=8000)
    with pytest.raises(LaunchConfigError, match="launch config key serve.max_running_requests is unknown"):
        serve_options({"max_running_requests": 4})
