"""How vLLM 0.34.0 reads a `vllm serve` command line, and the typed values of the flags dcpctl passes through.

vLLM's parser (utils/argparse_utils.py FlexibleArgumentParser, over the options of
entrypoints/common/cli_args.py make_arg_parser, dcpctl/data/engines/vllm-0.34.0.json) first rewrites the
command line: underscores in an option's name (up to its first dot) become dashes, and dotted sub-options
(`--attention-config.backend FLASHMLA`) are merged into one JSON value per option (a value that is not JSON
is a human-readable integer, else a string); argparse then takes unambiguous prefixes of long options and
converts each value with the option's type: `human_readable_int` (`32k` = 32,000, `32K` = 32,768; the
max-model-len form also takes `-1` and `auto`), JSON for config options; backend names are upper-cased
(config/attention.py AttentionConfig.validate_backend_before, where `auto` means unset).
"""
from __future__ import annotations

import json
import re
from typing import Any

from dcpctl.plan.engine_args import EngineArg, EngineTable, PassThrough, load_table, split
from dcpctl.plan.errors import UserError
from dcpctl.plan.vllm import VLLM_VERSION

AUTO = -1  # max-model-len -1 / auto: the model's own length
DECIMAL = {"k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12}
BINARY = {"K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}
JSON_TYPES = ("json", "union_dict_and_str")


def table() -> EngineTable:
    return load_table(f"vllm-{VLLM_VERSION}.json")


def optimization_level(tokens: list[str]) -> list[str]:
    """`-O3`, `-O=3` and `-O 3` (0-3) -> `--optimization-level 3`, as FlexibleArgumentParser rewrites them."""
    out: list[str] = []
    for i, tok in enumerate(tokens):
        if tok.startswith("-O") and tok != "-O":
            out += ["--optimization-level", tok[3:] if tok[2] == "=" else tok[2:]]
        elif tok == "-O" and i + 1 < len(tokens) and tokens[i + 1] in ("0", "1", "2", "3"):
            out.append("--optimization-level")
        else:
            out.append(tok)
    return out


def normalize(tok: str) -> str:
    """`--tensor_parallel_size=8` -> `--tensor-parallel-size=8` (only the name, up to its first dot)."""
    if not tok.startswith("--"):
        return tok
    name, eq, value = tok.partition("=")
    head, dot, tail = name[2:].partition(".")
    return "--" + head.replace("_", "-") + dot + tail + eq + value


def human_int(value: str, flag: str, auto: bool = False) -> int:
    """utils/argparse_utils.py human_readable_int (auto: human_readable_int_or_auto, -1 for `-1` / `auto`)."""
    v = value.strip()
    if auto and (v == "-1" or v.lower() == "auto"):
        return AUTO
    m = re.fullmatch(r"(\d+(?:\.\d+)?)([kKmMgGtT])", v)
    try:
        if m and m.group(2) in DECIMAL:
            return int(float(m.group(1)) * DECIMAL[m.group(2)])
        if m:
            return int(m.group(1)) * BINARY[m.group(2)]
        return int(v)
    except ValueError:
        raise UserError(f"{flag} takes an integer (1k = 1,000, 1K = 1,024) in `vllm serve` (vLLM {VLLM_VERSION}), "
                        f"got {value!r}") from None


def backend_name(value: str) -> str:
    """An attention backend as vLLM reads it: any case; `auto` leaves the choice to vLLM."""
    return "auto" if value.lower() == "auto" else value.upper()


def config_file(tokens: list[str]) -> list[str]:
    """`--config FILE.yaml` -> its options in front of the others (FlexibleArgumentParser._pull_args_from_config
    and load_config_file: a later flag on the line wins; true -> `--key`, false -> `--no-key` where it exists,
    a list -> `--key v1 v2`, a mapping -> JSON)."""
    if "--config" not in tokens:
        return tokens
    i = tokens.index("--config")
    if tokens.count("--config") > 1 or i + 1 >= len(tokens):
        raise UserError("vllm serve takes one --config FILE (a .yaml or .yml file)")
    path = tokens[i + 1]
    if path.rsplit(".", 1)[-1] not in ("yaml", "yml"):
        raise UserError(f"--config {path}: vLLM {VLLM_VERSION} reads a .yaml or .yml config file")
    from dcpctl.plan.yamlio import read_yaml
    from pathlib import Path
    out: list[str] = []
    for key, value in read_yaml(Path(path)).items():
        flag = f"--{key}"
        if isinstance(value, bool):
            out += [flag] if value else [f"--no-{key}"] if table().lookup(f"--no-{key}") else []
        elif isinstance(value, list):
            out += [flag, *map(str, value)] if value else []
        elif isinstance(value, dict):
            out += [flag, json.dumps(value)]
        else:
            out += [flag, str(value)]
    return out + tokens[:i] + tokens[i + 2:]


def _dotted(tokens: list[str]) -> tuple[list[str], list[PassThrough]]:
    """(the tokens without dotted sub-options, one PassThrough per dotted sub-option, as typed)."""
    rest: list[str] = []
    out: list[PassThrough] = []
    i = 0
    while i < len(tokens):
        tok = normalize(tokens[i])
        name, eq, inline = tok.partition("=")
        if not (tok.startswith("-") and "." in name):
            rest.append(tokens[i])
            i += 1
            continue
        base = name.split(".")[0]
        arg = table().lookup(base)
        if arg is None or arg.nargs == "0":
            raise UserError(f"{name}: {base} is not a `vllm serve` option with sub-options (vLLM {VLLM_VERSION})")
        if not eq and i + 1 >= len(tokens):
            raise UserError(f"{name} needs a value in `vllm serve` (vLLM {VLLM_VERSION})")
        n = 1 if eq else 2
        out.append(PassThrough(arg.dest, arg.flags[0], tuple(tokens[i:i + n]), (inline if eq else tokens[i + 1],)))
        i += n
    return rest, out


def split_line(tokens: list[str], caller: dict[str, bool]) -> tuple[list[str], list[PassThrough]]:
    """(the tokens dcpctl parses, in dcpctl's spelling, the other `vllm serve` flags as typed) of a command line
    under --engine vllm; a flag or value vLLM refuses is one sentence, exit 2."""
    head = tokens[:tokens.index("--")] if "--" in tokens else tokens
    plain, dotted = _dotted(config_file(head))
    plain = optimization_level([normalize(t) for t in plain])
    mine, rest = split(table(), plain, caller)
    for p in rest:
        _check(table().by_dest[p.dest], p.flag, p.values)
    return _own_values(_last_wins(mine, caller), caller) + tokens[len(head):], rest + dotted


def _groups(mine: list[str], caller: dict[str, bool]) -> list[tuple[EngineArg | None, list[str]]]:
    """The tokens dcpctl parses, one group per option with its value (its vLLM option, or None: not vLLM's)."""
    out: list[tuple[EngineArg | None, list[str]]] = []
    i = 0
    while i < len(mine):
        name, eq, _ = mine[i].partition("=")
        takes = name.startswith("-") and caller.get(name) and not eq and i + 1 < len(mine)
        arg = table().lookup(name) if name.startswith("-") else None
        out.append((arg, mine[i:i + 2] if takes else [mine[i]]))
        i += 2 if takes else 1
    return out


def _last_wins(mine: list[str], caller: dict[str, bool]) -> list[str]:
    """An option vLLM reads twice (`--config` then the line, `--decode-context-parallel-size` then `-dcp`): the
    last one, as argparse keeps it."""
    groups = _groups(mine, caller)
    last = {id(a): i for i, (a, _) in enumerate(groups) if a is not None}
    return [t for i, (a, g) in enumerate(groups) if a is None or last[id(a)] == i for t in g]


def _own_values(mine: list[str], caller: dict[str, bool]) -> list[str]:
    """vLLM's value forms of the options dcpctl parses itself: human-readable lengths, any-case backends."""
    out: list[str] = []
    for arg, g in _groups(mine, caller):
        name, eq, inline = g[0].partition("=")
        value = inline if eq else g[1] if len(g) > 1 else None
        if arg is None or value is None or arg.dest not in ("max_model_len", "attention_backend"):
            out += g
        elif arg.dest == "attention_backend":
            out += [name, backend_name(value)]
        elif (length := human_int(value, name, auto=True)) != AUTO:  # auto: the model's length, as unset
            out += [name, str(length)]
    return out


def _check(arg: EngineArg, flag: str, values: tuple[str, ...]) -> None:
    for v in values:
        typed(arg, flag, v)


def typed(arg: EngineArg, flag: str, value: str) -> Any:
    """One value as vLLM's argparse converts it (UserError where argparse refuses it)."""
    if arg.type in ("human_readable_int", "human_readable_int_or_auto"):
        return human_int(value, flag, auto=arg.type.endswith("auto"))
    if arg.type in JSON_TYPES:
        try:
            return json.loads(value)
        except json.JSONDecodeError:
            if arg.type == "union_dict_and_str":
                return value
            raise UserError(f"{flag} takes JSON in `vllm serve` (vLLM {VLLM_VERSION}), got {value!r}") from None
    return value


def settings(groups: tuple[tuple[str, ...], ...]) -> dict[str, Any]:
    """The passed-through flags (as typed, one token tuple each) -> {vLLM dest: its value as vLLM reads it};
    dotted sub-options merge into their option's dict, a later flag wins."""
    out: dict[str, Any] = {}
    for g in groups:
        g = tuple(optimization_level(list(g)))
        name, eq, inline = normalize(g[0]).partition("=")
        base, dot, keys = name.partition(".")
        arg = table().lookup(base)
        if arg is None:
            continue
        raw = inline if eq else (g[1] if len(g) > 1 else None)
        if arg.nargs == "0":
            out[arg.dest] = not base.startswith(("--no-", "--disable-"))
        elif dot:
            out[arg.dest] = _merge(out.get(arg.dest), keys.split("."), _sub_value(raw or ""))
        elif raw is not None:
            value = typed(arg, base, raw)
            out[arg.dest] = _merge(out.get(arg.dest), [], value) if isinstance(value, dict) else value
    return out


def _sub_value(raw: str) -> Any:
    try:
        return json.loads(raw)
    except json.JSONDecodeError:
        try:
            return human_int(raw, "")
        except UserError:
            return raw


def _merge(into: Any, keys: list[str], value: Any) -> Any:
    if not keys:
        if isinstance(into, dict) and isinstance(value, dict):
            return {**into, **{k: _merge(into.get(k), [], v) for k, v in value.items()}}
        return value
    base = dict(into) if isinstance(into, dict) else {}
    base[keys[0]] = _merge(base.get(keys[0]), keys[1:], value)
    return base
