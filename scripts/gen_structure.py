"""Regenerate docs/structure.md from module docstrings: python scripts/gen_structure.py (from the repo root)."""
import ast, pathlib, collections
root = pathlib.Path("dcpctl")
groups = collections.OrderedDict()
heads = {
 "dcpctl": "the package root",
 "dcpctl/cli": "one file per command; a rich Console for all output; never imports torch for `plan`",
 "dcpctl/plan": "pure and torch-free: topology, rank map, model spec, hardware, decisions, memory, compositions, cost model",
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
pathlib.Path("docs/structure.md").write_text("\n".join(out))
