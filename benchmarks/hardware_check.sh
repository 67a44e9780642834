#!/usr/bin/env bash
# What `--hardware auto` sees on this machine and what the cost model does with it: the raw probe,
# the plan's hardware section, a plan estimate and a recommendation on the detected hardware, and a check
# that the memory bandwidth used is within 10% of the h200-8 profile's (or of the calibration file's).
# usage: benchmarks/hardware_check.sh [CALIBRATION.yaml]      (PYTHON=.venv/bin/python to pick the interpreter)
# Needs dcpctl installed (pip install -e '.[nvml]' for NVML; without nvidia-ml-py it reads nvidia-smi).
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
CAL=${1:-}
dcpctl() { "$PY" -m dcpctl.cli.main "$@"; }
KIMI=(--model-preset kimi-linear-48b-a3b --tp-size 1 --context-len 32768 --concurrency 8 ${CAL:+--calibration "$CAL"})
echo "== probe (dcpctl.plan.detect.probe)"
"$PY" -c 'from importlib.metadata import version; print("nvidia-ml-py", version("nvidia-ml-py"))' 2>&1 | tail -1
"$PY" -c 'from dcpctl.plan.detect import probe; print(probe())'
echo "== dcpctl plan --model-preset deepseek-v3.1 --tp-size 1 --dcp-size 1 --format json: its hardware section"
echo "   (the plan itself is invalid on one GPU: the weights do not fit)"
dcpctl plan --model-preset deepseek-v3.1 --tp-size 1 --dcp-size 1 --format json \
  | "$PY" -c 'import json, sys; print(json.dumps(json.load(sys.stdin)["hardware"], indent=1))'
echo "== dcpctl plan ${KIMI[*]}"
dcpctl plan "${KIMI[@]}"
echo "== dcpctl recommend ${KIMI[*]}"
dcpctl recommend "${KIMI[@]}"
echo "== check: the bandwidth the estimate used against h200-8's (or the calibration's)"
dcpctl plan "${KIMI[@]}" --format json | "$PY" -c '
import json, sys
import yaml
d = json.load(sys.stdin)
hw, est = d["hardware"], d.get("estimate", {})
ref = yaml.safe_load(open(sys.argv[1]))["calibration"]["copy_tbps"] if sys.argv[1:] else 4.8
got = hw["hbm_tbps"] or 0
ok = bool(got and abs(got - ref) <= 0.1 * ref and est.get("constants"))
verdict = "PASS" if ok else "FAIL"
print(f"hbm_tbps {got} from {hw['"'"'figures'"'"']['"'"'hbm_tbps'"'"']!r} vs {ref}; estimate constants: "
      f"{est.get('"'"'constants'"'"')!r}; {verdict}")
sys.exit(0 if ok else 1)' ${CAL:+"$CAL"}
