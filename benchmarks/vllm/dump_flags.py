#!/usr/bin/env python3
"""Dump every `vllm serve` option of the installed vLLM to dcpctl/data/engines/vllm_serve_flags.json.

Runs in the vLLM venv (benchmarks/vllm/setup_venv.sh):
    /tmp/vllmvenv/bin/python benchmarks/vllm/dump_flags.py > dcpctl/data/engines/vllm_serve_flags.json
"""
import argparse
import json

import vllm_cpu  # beside this file: run by path in the vLLM venv, its folder is first on sys.path


def main() -> None:
    vllm_cpu.install("h200-8")
    import vllm
    from vllm.entrypoints.common.cli_args import make_arg_parser
    from vllm.utils.argparse_utils import FlexibleArgumentParser
    parser = make_arg_parser(FlexibleArgumentParser())
    flags = []
    for a in parser._actions:
        if not a.option_strings or isinstance(a, argparse._HelpAction):
            continue
        takes = a.nargs != 0 and not isinstance(a, (argparse._StoreTrueAction, argparse._StoreFalseAction,
                                                     argparse.BooleanOptionalAction, argparse._StoreConstAction))
        flags.append({"flags": a.option_strings, "dest": a.dest, "takes_value": takes})
    doc = {"engine": "vllm", "version": vllm.__version__,
           "source": "vllm/entrypoints/common/cli_args.py make_arg_parser (every `vllm serve` option), "
                     "dumped by benchmarks/vllm/dump_flags.py", "flags": flags}
    print(json.dumps(doc, indent=0))


if __name__ == "__main__":
    main()
