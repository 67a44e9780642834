#!/usr/bin/env python3
"""Write SGLang's `sglang serve` arguments as data: dcpctl/data/engines/sglang-<version>.json.

Runs in the SGLang environment (benchmarks/sglang/setup_venv.sh) and asks SGLang's own parser: the
argparse parser `prepare_server_args` builds (`ServerArgs.add_cli_args`), one entry per action with its
option strings, arity, type, choices and default. dcpctl reads the file to accept every `sglang serve`
flag (dcpctl/plan/sglang_args.py); nothing in it is written by hand.

    /tmp/sglvenv/bin/python benchmarks/sglang/dump_args.py [OUT]
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def _type_name(action: argparse.Action) -> str:
    t = action.type
    if t is None:
        return "bool" if action.nargs == 0 else "str"
    return getattr(t, "__name__", type(t).__name__)


def _nargs(action: argparse.Action) -> str:
    if action.nargs is None:
        return "1"
    return str(action.nargs)


def _jsonable(v):
    try:
        json.dumps(v)
        return v
    except TypeError:
        return str(v)


def dump() -> dict:
    import sglang
    from sglang.srt.server_args import ServerArgs
    parser = argparse.ArgumentParser(prog="sglang serve")
    ServerArgs.add_cli_args(parser)
    args = []
    for a in parser._actions:
        if isinstance(a, argparse._HelpAction) or not a.option_strings:
            continue
        canon = "--" + a.dest.replace("_", "-")
        flags = sorted(a.option_strings, key=lambda s: s != canon)  # SGLang's own spelling first, then as
                                                                    # declared
        args.append({"dest": a.dest, "flags": flags, "nargs": _nargs(a), "type": _type_name(a),
                     "choices": sorted(map(str, a.choices)) if a.choices is not None else None,
                     "default": _jsonable(a.default), "help": (a.help or "").split(". ")[0][:160]})
    return {"engine": "sglang", "version": sglang.__version__, "command": "sglang serve",
            "source": "argparse.ArgumentParser(prog='sglang serve') + ServerArgs.add_cli_args "
                      "(sglang/srt/server_args.py prepare_server_args); written by "
                      "benchmarks/sglang/dump_args.py",
            "allow_abbrev": parser.allow_abbrev, "args": args}


def main() -> int:
    doc = dump()
    out = (Path(sys.argv[1])
           if len(sys.argv) > 1 else REPO / "dcpctl/data/engines" / f"sglang-{doc['version']}.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(doc, indent=0, sort_keys=False) + "\n")
    print(f"{len(doc['args'])} arguments of sglang {doc['version']} -> {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
