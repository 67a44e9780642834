"""Snapshot tests: every export format is a pure function of the plan.

Regenerate after an intended change with UPDATE_SNAPSHOTS=1 and review the diff."""
import os
from pathlib import Path

import pytest
import yaml

from dcpctl.launch.exports import EXPORTERS, ExportOptions
from dcpctl.plan.errors import UserError
from dcpctl.plan.planner import make_plan
from dcpctl.plan.resolve import merge_options, request_from_options

SNAP = Path(__file__).parent / "snapshots"
CASES = {
    "k3-dpa": ("kimi-k3-32gpu-dpa-dcp8", {}),
    "v31-tp8": ("deepseek-v3.1-tp8-dcp8", {}),
    "v31-pd": ("deepseek-v3.1-tp8-dcp8",
               {"disaggregation_mode": "decode", "disaggregation_peer_dcp_size": 1}),
    "v31-2node": ("deepseek-v3.1-tp8-dcp8", {"tp_size": 16, "nnodes": 2}),
}


def render(case: str, fmt: str) -> str:
    preset, extra = CASES[case]
    opts = merge_options(extra, set(extra), preset)
    plan = make_plan(request_from_options(opts))
    model = plan.request.model.extra["hf_repo"]
    files = EXPORTERS[fmt](plan, ExportOptions(model, "10.0.0.1:5000"))
    return "".join(f"# ---- {name}\n{text}" for name, text in sorted(files.items()))


# the bundled runtime has no fi_a2a exchange and serves PD only in batch mode: no torchrun export for these
NOT_FOR_TORCHRUN = {"k3-dpa", "v31-pd"}


@pytest.mark.parametrize("fmt", sorted(f for f in EXPORTERS if f != "vllm"))  # vllm: test_export_vllm.py
@pytest.mark.parametrize("case", sorted(CASES))
def test_snapshot(case, fmt):
    if fmt == "torchrun" and case in NOT_FOR_TORCHRUN:
        with pytest.raises(UserError):
            render(case, fmt)
        return
    got = render(case, fmt)
    path = SNAP / f"{case}.{fmt}.txt"
    if os.environ.get("UPDATE_SNAPSHOTS") or not path.exists():
        path.write_text(got)
    assert got == path.read_text()


def test_pure():
    assert render("k3-dpa", "sglang") == render("k3-dpa", "sglang")


def test_sglang_node_ranks_and_env():
    text = render("k3-dpa", "sglang")
    assert text.count("sglang serve") == 8
    assert "--node-rank 7 --dist-init-addr 10.0.0.1:5000" in text
    assert "NCCL_MNNVL_ENABLE=1" in text and "--attn-dp-size 4 --dcp-size 8 --dcp-comm-backend fi_a2a" in text


def test_pd_pair_and_router():
    text = render("v31-pd", "sglang")
    assert "--disaggregation-mode decode" in text and "--disaggregation-mode prefill" in text
    assert "sglang_router.launch_router --pd-disaggregation" in text


def test_k8s_manifest_shape():
    doc = yaml.safe_load(render("v31-2node", "k8s").split("\n", 1)[1])
    lws = doc["spec"]["leaderWorkerTemplate"]
    assert doc["kind"] == "LeaderWorkerSet" and lws["size"] == 2
    worker = lws["workerTemplate"]["spec"]["containers"][0]
    assert "$(LWS_WORKER_INDEX)" in worker["args"] and worker["resources"]["limits"]["nvidia.com/gpu"] == 8


def test_slurm_node_rank_from_slurm():
    text = render("v31-2node", "slurm")
    assert "#SBATCH --nodes=2" in text and '--node-rank "$SLURM_NODEID"' in text


def test_k8s_mounts_dev_shm():
    doc = yaml.safe_load(render("v31-tp8", "k8s").split("\n", 1)[1])
    for role in ("leaderTemplate", "workerTemplate"):
        spec = doc["spec"]["leaderWorkerTemplate"][role]["spec"]
        assert spec["volumes"] == [{"name": "dshm", "emptyDir": {"medium": "Memory"}}]
        assert spec["containers"][0]["volumeMounts"] == [{"name": "dshm", "mountPath": "/dev/shm"}]


def test_eagle_family_exports_steps_and_topk():
    # SGLang takes the three together: the plan resolves them (none given: SGLang's 3 / 1 / 4) and the export
    # writes all three; draft tokens alone are a plan violation, as in SGLang
    for algo in ("EAGLE", "NEXTN"):
        for given, want in (({}, (3, 1, 4)),
                            ({"speculative_num_steps": 2, "speculative_eagle_topk": 1}, (2, 1, 3))):
            opts = merge_options({"speculative_algorithm": algo, **given}, set(), "deepseek-v3.1-tp8-dcp8")
            plan = make_plan(request_from_options(opts))
            assert plan.valid, plan.violations
            text = EXPORTERS["sglang"](plan, ExportOptions("m"))["node-0.sh"]
            assert (f"--speculative-algorithm {algo} --speculative-num-steps {want[0]} "
                    f"--speculative-eagle-topk {want[1]} --speculative-num-draft-tokens {want[2]}") in text
        alone = make_plan(request_from_options(merge_options(
            {"speculative_algorithm": algo, "speculative_num_draft_tokens": 4}, set(),
            "deepseek-v3.1-tp8-dcp8")))
        assert [v.code for v in alone.violations] == ["spec_eagle_params"]
