"""SGLang 0.5.23's `sglang serve` flags as data, and how a pasted `sglang serve` line reads.

The table (dcpctl/data/engines/sglang-0.5.23.json) is written by benchmarks/sglang/dump_args.py from
SGLang's own parser. A flag that dcpctl also has (same option string) is parsed by dcpctl and changes
the plan; every other flag of the table passes through: listed by the plan, carried by `export sglang`
exactly as typed. An engine is one `EngineSyntax` value; another engine adds its own the same way.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from dcpctl.plan.engine_args import EngineTable, load_table
from dcpctl.plan.sglang import SGLANG_VERSION


@dataclass(frozen=True)
class EngineSyntax:
    """How a command line of one engine is recognised inside a dcpctl command line."""
    table_file: str
    prefixes: tuple[tuple[str, ...], ...]  # the launcher's words, a regex per word (`python3 -m
                                           # sglang.launch_server`)
    positional_model: bool  # `sglang serve MODEL` names the model without --model-path

    @property
    def table(self) -> EngineTable:
        return load_table(self.table_file)

    def strip_launcher(self, args: list[str]) -> tuple[list[str], bool]:
        """`dcpctl plan [-- ]sglang serve ARGS`: the launcher words (and the `--` before them) removed."""
        for i in range(len(args)):
            for prefix in self.prefixes:
                n = len(prefix)
                if len(args) - i >= n and all(re.fullmatch(p, a) for p, a in zip(prefix, args[i:i + n])):
                    before = args[:i - 1] if i and args[i - 1] == "--" else args[:i]
                    rest = args[i + n:]
                    if self.positional_model and rest and not rest[0].startswith("-"):
                        rest = ["--model-path", rest[0], *rest[1:]]  # serve.py
                                                                     # _normalize_positional_model_path
                    return before + rest, True
        return args, False

    def rename(self, args: list[str], caller: dict[str, bool]) -> list[str]:
        """Engine spellings of dcpctl's flags (`--tp`, `--dp`, `--tensor-parallel-size`) -> dcpctl's own."""
        out = []
        after_dashes = False
        for tok in args:
            after_dashes = after_dashes or tok == "--"
            name, eq, val = tok.partition("=")
            if after_dashes or not name.startswith("--") or name in caller:
                out.append(tok)
                continue
            arg = self.table.lookup(name)
            mine = [f for f in (arg.flags if arg else ())
                    if f in caller and f.startswith("--no-") == name.startswith("--no-")]
            out.append(f"{mine[0]}{eq}{val}" if mine else tok)
        return out


# dcpctl models these SGLang flags and also carries them as typed: SGLang's --attention-backend sets the
# prefill kernel too, which the plan (decode only) does not write.
CARRY_AS_TYPED = frozenset({"--attention-backend"})
PYTHON = r"python(3(\.\d+)?)?"
SGLANG = EngineSyntax(
    table_file=f"sglang-{SGLANG_VERSION}.json",
    prefixes=(("sglang", "serve"), (PYTHON, "-m", r"sglang\.launch_server")),
    positional_model=True,
)


def sglang_table() -> EngineTable:
    return SGLANG.table
