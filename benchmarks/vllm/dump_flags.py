#!/usr/bin/env python3
"""Write vLLM's `vllm serve` arguments as data: dcpctl/data/engines/vllm-<version>.json.

Runs in the vLLM venv (benchmarks/vllm/setup_venv.sh) and asks vLLM's own parser
(entrypoints/common/cli_args.py make_arg_parser over utils/argparse_utils.py FlexibleArgumentParser):
one entry per action with its option strings, arity, value type (the function argparse converts with,
unwrapped from vLLM's optional-type wrapper), choices and default, in the format of
dcpctl/plan/engine_args.py. dcpctl reads it to accept every `vllm serve` flag (dcpctl/plan/vllm_args.py);
nothing in it is written by hand.

    /tmp/vllmvenv/bin/python benchmarks/vllm/dump_flags.py [OUT]
"""
import argparse
import json
import sys
from pathlib import Path

import vllm_cpu  # beside this file: run by path in the vLLM venv, its folder is first on sys.path

REPO = Path(__file__).resolve().parents[2]


def _type_name(a: argparse.Action) -> str:
    if a.nargs == 0:
        return "bool"
    t = a.type
    if t is None:
        return "str"
    inner = [c.cell_contents for c in (getattr(t, "__closure__", None) or ()) if callable(c.cell_contents)]
    if getattr(t, "__name__", "") == "_optional_type" and inner:
        t = inner[0]  # vllm/engine/arg_utils.py optional_type(return_type): None or the inner type
    name = getattr(t, "__name__", type(t).__name__)
    return {"parse_dataclass": "json", "loads": "json", "_parse_type": "json"}.get(name, name)


def _jsonable(v):
    try:
        json.dumps(v)
        return v
    except TypeError:
        return str(v)


def main() -> None:
    vllm_cpu.install("h200-8")
    import vllm
    from vllm.entrypoints.common.cli_args import make_arg_parser
    from vllm.utils.argparse_utils import FlexibleArgumentParser
    parser = make_arg_parser(FlexibleArgumentParser())
    args = []
    for a in parser._actions:
        if not a.option_strings or isinstance(a, argparse._HelpAction):
            continue
        nargs = "0" if a.nargs == 0 else "1" if a.nargs is None else str(a.nargs)
        args.append({"dest": a.dest, "flags": list(a.option_strings), "nargs": nargs, "type": _type_name(a),
                     "choices": sorted(map(str, a.choices)) if a.choices is not None else None,
                     "default": _jsonable(a.default), "help": " ".join((a.help or "").split()).split(". ")[0][:160]})
    doc = {"engine": "vllm", "version": vllm.__version__, "command": "vllm serve",
           "source": "vllm/entrypoints/common/cli_args.py make_arg_parser (every `vllm serve` option), "
                     "written by benchmarks/vllm/dump_flags.py", "allow_abbrev": parser.allow_abbrev, "args": args}
    out = Path(sys.argv[1]) if len(sys.argv) > 1 else REPO / "dcpctl/data/engines" / f"vllm-{doc['version']}.json"
    out.write_text(json.dumps(doc, indent=0) + "\n")
    print(f"{len(args)} arguments of vllm {doc['version']} -> {out}", file=sys.stderr)


if __name__ == "__main__":
    main()
