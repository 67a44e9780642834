#!/usr/bin/env bash
[ -e dcpctl/presets ] || ln -s ../presets dcpctl/presets; export PYTHONPATH=$PWD NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
# One device call (one H200; carry .vendor): FlashInfer as the runtime's local attention backend (issue 18).
#   1. FlashInfer from the vendored sdist, its MLA module JIT-built (timed);
#   2. GPU tests: every backend through the DCP merge = unsplit attention (DCP 1/2/4), greedy ids across backends;
#   3. `dcpctl bench kernel`: ours and FlashInfer side by side over the full grid, the backend table saved;
#   4. `dcpctl generate --device cuda` greedy ids per --attention-backend (triton, flashinfer, auto);
#   5. a summary: the automatic choice (shipped table and this run's table) against the best per cell.
# Every part runs; each one's exit status goes to $OUT/flashinfer/status.txt.
# usage: OUT=dir bash benchmarks/gpu_flashinfer.sh
set -u
cd "$(dirname "$0")/.."
O=${OUT:-/tmp/dcpctl-gpu}/flashinfer
mkdir -p "$O"
export PYTHONUNBUFFERED=1 DCPCTL_FLASHINFER_SDIST=$PWD/.vendor/flashinfer_python-0.2.14.tar.gz
export DCPCTL_FLASHINFER_WORK=/tmp/dcpctl-flashinfer DCPCTL_GPU_REPORT=$O
: > "$O/status.txt"
. benchmarks/gpu_part.sh
python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__, torch.cuda.get_device_name())" \
  | tee "$O/versions.txt"
part jit 150 python3 benchmarks/flashinfer/jit.py
part tests 150 python3 -m pytest -q -p no:cacheprovider -rfEs tests/runtime/test_gpu_backends.py
part bench 270 bash -c 'python3 -m dcpctl.cli.main bench kernel --no-naive --heads 16,64,128 \
  --contexts 8K,32K,64K,128K --batches 1,8,32,64 --save-table "$0/h200_table.json" --format json > "$0/kernel.json"' "$O"
part generate 120 python3 - "$O" <<'PY'
import json, subprocess, sys, tempfile
from pathlib import Path
from dcpctl.runtime.tiny import write_tiny_model
from tests.runtime.test_gpu_backends import LATENT
out = Path(sys.argv[1])
m = write_tiny_model(Path(tempfile.mkdtemp()) / "latent", **LATENT)
prompts = [",".join(str(4 + (7 * i + 3 * j) % 250) for j in range(n)) for i, n in enumerate((3, 40, 150, 600))]
ids = {}
for be in ("triton", "flashinfer", "auto"):
    cmd = [sys.executable, "-m", "dcpctl.cli.main", "generate", "--model-path", str(m), "--device", "cuda",
           "--dtype", "bfloat16", "--page-size", "64", "--attention-backend", be, "--max-new-tokens", "16",
           "--temperature", "0", "--format", "json"] + [a for p in prompts for a in ("--prompt-ids", p)]
    r = subprocess.run(cmd, capture_output=True, text=True)
    (out / f"generate_{be}.err").write_text(r.stderr)
    print(be, "rc", r.returncode, [ln for ln in r.stderr.splitlines() if "local attention" in ln])
    ids[be] = [o["output_ids"] for o in json.loads(r.stdout)["outputs"]] if r.returncode == 0 else None
same = {be: ids[be] == ids["triton"] for be in ids}
(out / "generate.json").write_text(json.dumps({"ids": ids, "equal_to_triton": same}, indent=1))
print("equal to triton:", same)
sys.exit(0 if all(same.values()) else 1)
PY
part summary 60 python3 - "$O" <<'PY'
import json, sys
from pathlib import Path
from dcpctl.plan.attention_table import Key, decide, load_table
o = Path(sys.argv[1])
res = json.loads((o / "kernel.json").read_text())
tables = {"shipped": load_table(), "this run": load_table(o / "h200_table.json")}
avail = {b: None for b in res["backends"]}
lines, worst = [], {}
for c in res["cells"]:
    us = {b: v["time_us"] for b, v in c["backends"].items() if v.get("time_us")}
    best = min(us.values())
    row = [c["heads"], c["ctx"], c["batch"]] + [round(us.get(b, float("nan")), 1) for b in ("triton", "flashinfer")]
    for name, t in tables.items():
        pick = decide(Key(c["heads"], "bf16", 64, res["device"]), "auto", avail, t).pick(c["batch"], c["ctx"])
        slow = us.get(pick, float("nan")) / best - 1
        worst[name] = max(worst.get(name, 0), slow) if slow == slow else float("nan")
        row += [pick, f"{slow:+.1%}"]
    fr = {b: round(v["fraction"], 3) for b, v in c["backends"].items() if v.get("fraction")}
    row += [fr, c["batch"] * c["ctx"] >= 512 * 1024]
    lines.append(row)
print("heads ctx batch triton_us flashinfer_us | shipped pick, over best | this-run pick, over best | fractions | BxCtx>=512K")
for r in lines:
    print(*r)
print("worst auto over best:", {k: f"{v:.1%}" for k, v in worst.items()})
big = [r for r in lines if r[-1]]
for h in (16, 64, 128):
    fr = [max(r[-2].values()) for r in big if r[0] == h]
    print(f"heads {h}: best backend's roofline fraction in B x ctx >= 512K cells: min {min(fr):.3f} of {len(fr)}")
(o / "summary.json").write_text(json.dumps({"rows": lines, "worst_auto_over_best": worst}, indent=1))
PY
cat "$O/status.txt"
