"""Regenerate docs/structure.md from module docstrings: python scripts/gen_structure.py (from the repo root)."""
import ast, pathlib, collections
TAIL = """## One rule per fact

Each fact below is one function (or one table) that every caller uses, so a change is one edit.

| fact | where | callers |
| --- | --- | --- |
| reading config.json (and generation_config.json's EOS ids) | `plan/hf_config.py` `read_hf_config` / `parse_hf_config`, defaults and aliases in `plan/hf_defaults.py`, layer kinds in `plan/hf_layers.py` | the planner (`plan/model.py` ModelSpec = a projection), the runtime (`runtime/models/config.py` MlaConfig, `kimi_config.py` HybridConfig), `server/serve.py` (`limits()`), `worker.py` (`eos_token_ids`) |
| the shared model sizes | `plan/hf_config.py` `MlaShape` (base of HfConfig, ModelSpec and MlaConfig) | every reader of a model |
| the stripe rule (owner = p % c, row = p // c) | `runtime/kv/allocator.py` `owner`, `physical`, `owned`, `virtual_slot`, `owned_rows`, `owned_page_rows`, `local_len` | attention/layout.py, attention/paged.py, kv/host_tier.py, engine/engine.py, pd/driver.py, pd/plan.py (attention/graphs.py `prepare` still inlines it) |
| does a request fit | `runtime/fits.py` `kv_rows`, `misfit`, `room`, `max_total` | engine/request.py + engine/scheduler.py, server/limits.py (`ServerLimits`: max_model_len and the 400s), cli/generate.py |
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

## Adding an attention kernel

A kernel the runtime chooses between is one file in `runtime/attention/backends/` that registers one `Backend`
(the interface: `backends/base.py`), plus its module in that package's one import line (`__init__.py`; the order
is the order blockers are asked). The file provides:

| field | what |
| --- | --- |
| `name`, `kind` | the name the measured table and `--attention-backend` use; `absorbed` (reads one layer of the paged latent pool through the batch's `PagedLayout`) or `mha` (the MHA form's kernel over one up-projected key block, `attention/mha.py`) |
| `blocker(q, pool, v_dim)` | why it cannot run here, a clause the runtime's note quotes (`the KV pool is not on a GPU`), or None; memoize what it probes (a build, an import) |
| `run` | absorbed: `run(call, state) -> MLAOut` (o, lse, and the lse's base `e` or `2`; rows that see no key get lse -inf; written into `call.out` when given); mha: `run(q, k, v, causal, scale) -> (o, lse)`, natural-log lse |
| `prepare(call)` | absorbed, optional: the per-batch state from the layout (plan inputs, metadata), run on the batch's first layer and handed to every layer's `run` |
| `graph` | None when prepare and run can be captured in a CUDA graph (device work only, no host sync: a replay repeats them), else why not: decode graphs then never pick it |
| `one_token` | it takes chunks of one token only (decode): ours runs prefill, extend and verification chunks |

An absorbed kernel is then weighed by `plan/attention_table.py`'s rule like the built-ins (`attention/backend_choice.py`):
a table whose cells time it under its name (`--attention-table FILE`) picks it where it is fastest, and
`--attention-backend NAME` fixes it where the name is one of that flag's choices (SGLang's names). Timing it in
`dcpctl bench kernel` and writing it into a shipped table is a `bench/kernel_<name>.py` side and its name in
`plan/attention_table.py` `BACKENDS`. An mha kernel runs where it is the first registered one with no blocker.
Ours picks its own kernel (Gluon or Triton) and tiles inside the `triton` backend (`kernel_choice.py`,
`kernel_config.py`). Tests: the blocker's sentences on CPU, and the kernel's output against the torch
reference through the LSE merge (tests/runtime/attention/test_attention_backends.py does so for FlashInfer with a
stand-in); tests/runtime/attention/test_attention_registry.py shows a kernel added by one registration.

## Plan lifecycle: flags to a running rank

1. `cli/plan.py` (or `generate`/`launch`): `cli/options.py` and `cli/runtime_options.py` read the flags;
   `plan/resolve.py` merges them with a preset or a saved plan into one frozen `PlanRequest`
   (`plan/hf_config.py` parses config.json; `plan/hardware.py` resolves `--hardware`, probing once with `plan/detect.py`).
2. `plan/planner.py` `make_plan`: `plan/topology.py` checks the degrees, `plan/groups.py` reads the rank map off
   the grid, `plan/decisions.py` makes every automatic choice once with its reason (`plan/kernels.py`,
   `plan/attention_table.py` with `dcpctl/tuning`, `plan/runtime_choices.py`), `plan/memory.py` and
   `plan/compose.py` add memory and the compositions' checks. No torch, no environment.
3. `cli/render_plan.py` prints it (or `--format json`); exit 2 when a rule is broken.
4. `launch/config.py` turns the plan into a typed `LaunchConfig` (`contract/launch_config.py`);
   `launch/torchrun.py` writes torchrun's argv and environment; `launch/runner.py` starts torchrun.
5. Every rank: `runtime/worker.py` parses the launch config once, `runtime/settings.py` takes its `runtime`
   section, `runtime/boot.py` builds the process groups (`runtime/parallel.py`) and loads the model
   (`runtime/models/loader.py`), then serves (`runtime/server/serve.py`) or runs the batch (`runtime/engine`).

## Request lifecycle: HTTP request to token

1. `runtime/server/frontend.py`: an HTTP worker process accepts `POST /v1/completions` (`guard.py`: host, auth,
   body size; `openai_api.py` + `protocol.py`: the body, 4xx JSON when it is bad).
2. `server/gen.py`: the prompt is tokenized (`text.py`), checked against the KV budget (`runtime/fits.py`) and
   handed to rank 0's engine loop over a pipe (`server/bridge.py`).
3. `server/loop.py`: rank 0 takes the new request and broadcasts the step's control message to every rank
   (`server/control.py`); each rank submits it to its engine (`engine/engine.py`).
4. `engine/scheduler.py`: admission by free virtual pages (`runtime/kv`: every rank allocates the same virtual
   pages and keeps the positions it owns, `p mod c`); the step takes decodes plus a prefill chunk.
5. `engine/engine.py` runs the model (`models/deepseek.py`; decode batches replay a CUDA graph,
   `engine/graph_runner.py` and `attention/graphs.py`); per MLA layer `models/attention.py` projects the query
   and writes the new latent rows to the owning rank's pool.
6. `attention/api.py` -> `attention/paged.py`: each rank attends its own stripe with the local kernel the rule picks
   (`attention/backend_choice.py` over the registry `attention/backends/`: ours `triton_mla.py`/`gluon_mla.py`,
   FlashInfer or FlashMLA), returning `o_r` and `lse_r`.
7. `attention/comm.py`: the DCP exchange (packed `a2a` or `ag_rs`); `attention/merge.py` / `fused_merge.py`:
   `o = sum_r exp(lse_r - logsumexp(lse)) o_r`, the merged attention output of this rank's heads.
8. The rest of the layer and the LM head (`models/mlp.py`, `models/quant.py`), then `engine/sample.py` picks the
   token; `engine/events.py` gathers each replica's events to rank 0.
9. `server/loop.py` hands the events back over the bridge; `server/gen.py` detokenizes (`text.py`) and the
   frontend streams the token (SSE) or returns the whole completion.
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
 "dcpctl/tuning": "measured tuning tables as data: one JSON file per kind and GPU, one loader, one device rule",
}
for f in sorted(root.rglob("*.py")):
    doc = ast.get_docstring(ast.parse(f.read_text())) or ""
    line = " ".join(doc.strip().split("\n\n")[0].split()) if doc.strip() else "(package marker)"
    groups.setdefault(str(f.parent), []).append((f.name, line))
out = ["# Structure", "", "One line per module (from its docstring); data flows plan -> launch -> runtime, never back.", "",
       "```", "presets/   models, hardware profiles, deployment recipes (YAML; shipped as dcpctl.presets)",
       "tests/     plan, cli, export, runtime (forked gloo ranks), serve (end to end), GPU tests marked `gpu`",
       "benchmarks/  scripts a user runs to measure dcpctl (gpu.sh SUITE for device runs), the SGLang and vLLM acceptance checks, data",
       "tools/     profilers and one-question probes (py-spy, cProfile, Nsight, ptxas, host overheads)",
       "docs/      user guides per command, environment variables (knobs.md), current benchmark figures", "```", ""]
for d, items in groups.items():
    sub = d.replace("dcpctl/runtime/", "")
    out.append(f"## {d}/" + (f" — {heads[d]}" if d in heads else ""))
    out.append("")
    for name, line in items:
        out.append(f"- `{name}`: {line}")
    out.append("")
out += TAIL.splitlines()
pathlib.Path("docs/structure.md").write_text("\n".join(out) + "\n")
