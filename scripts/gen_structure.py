"""Regenerate docs/structure.md from module docstrings: python scripts/gen_structure.py (from the repo root)."""
import ast, pathlib, collections
TAIL = """## One rule per fact

Each fact below is one function (or one table) that every caller uses, so a change is one edit.

| fact | where | callers |
| --- | --- | --- |
| reading config.json (and generation_config.json's EOS ids) | `plan/hf_config.py` `read_hf_config` / `parse_hf_config`, defaults and aliases in `plan/hf_defaults.py`, layer kinds in `plan/hf_layers.py` | the planner (`plan/model.py` ModelSpec = a projection), the runtime (`runtime/models/config.py` MlaConfig, `kimi_config.py` HybridConfig), `server/serve.py` (`limits()`), `worker.py` (`eos_token_ids`) |
| the shared model sizes | `plan/hf_config.py` `MlaShape` (base of HfConfig, ModelSpec and MlaConfig) | every reader of a model |
| the stripe rule (owner = p % c, row = p // c) | `runtime/kv/allocator.py` `owner`, `physical`, `owned`, `virtual_slot`, `owned_rows`, `owned_page_rows`, `local_len` | attention/layout.py, attention/paged.py, kv/host_tier.py, engine/engine.py, pd/driver.py, pd/plan.py (attention/graphs.py `prepare` still inlines it) |
| does a request fit | `runtime/fits.py` `kv_rows`, `misfit`, `room` | engine/request.py + engine/scheduler.py, server/gen.py + openai_api.py, cli/generate.py |
| dtype byte sizes | `plan/model.py` `DTYPE_BYTES` | plan/memory.py, plan/weights.py, plan/cost.py |

## Adding a decision

An automatic choice is made once, written once, and read once:

1. **One place in the plan.** `plan/decisions.py` `decide` resolves it from the PlanRequest into a
   `Decision(value, reason)` under one name (a helper in `plan/kernels.py` or its own plan module when
   it needs more than a few lines); the reason is the sentence `dcpctl plan` prints. A user flag that
   overrides it lives in `cli/options.py` and reaches `decide` through the PlanRequest.
2. **One typed field.** The launch config carries it as one field of its `decisions` section
   (`launch/config.py` writes it from the plan; docs/launch-config.md documents it), typed with the
   closed set of values when it is a choice, so a bad value is refused where the file is parsed.
3. **One reader.** The one runtime module that acts on it reads that field; it never restates a
   default or re-derives the choice (the runtime's own choices, such as the local kernel, are made in
   their module and said once through `runtime/notes.py`).

Tests: the plan test pins the value and the reason for the cases that pick each value; the runtime
test runs each value through its reader.
"""

root = pathlib.Path("dcpctl")
groups = collections.OrderedDict()
heads = {
 "dcpctl": "the package root",
 "dcpctl/cli": "one file per command; a rich Console for all output; never imports torch for `plan`",
 "dcpctl/plan": "pure and torch-free: topology, rank map, the config.json parse and model spec, hardware, decisions, memory, compositions, cost model",
 "dcpctl/contract": "the typed, torch-free plan -> runtime contract: frozen launch-config sections, parsed once",
 "dcpctl/launch": "plan -> launch config (YAML) -> torchrun argv/env; exports for real deployments",
 "dcpctl/bench": "`dcpctl bench ...`: measured, not asserted",
 "dcpctl/plot": "`--picture FILE`: matplotlib (the optional `plot` extra), imported only when a picture is asked for",
 "dcpctl/runtime": "torch.distributed runtime; reads only torchrun's environment and the launch config",
}
for f in sorted(root.rglob("*.py")):
    doc = ast.get_docstring(ast.parse(f.read_text())) or ""
    line = " ".join(doc.strip().split("\n\n")[0].split()) if doc.strip() else "(package marker)"
    groups.setdefault(str(f.parent), []).append((f.name, line))
out = ["# Structure", "", "One line per module (from its docstring); data flows plan -> launch -> runtime, never back.", "",
       "```", "presets/   models, hardware profiles, deployment recipes (YAML; shipped as dcpctl.presets)",
       "tests/     plan, cli, export, runtime (forked gloo ranks), serve (end to end), GPU tests marked `gpu`",
       "benchmarks/  device scripts and the SGLang acceptance check", "docs/      user guides per command, benchmarks", "```", ""]
for d, items in groups.items():
    sub = d.replace("dcpctl/runtime/", "")
    out.append(f"## {d}/" + (f" — {heads[d]}" if d in heads else ""))
    out.append("")
    for name, line in items:
        out.append(f"- `{name}`: {line}")
    out.append("")
out += TAIL.splitlines()
pathlib.Path("docs/structure.md").write_text("\n".join(out) + "\n")
