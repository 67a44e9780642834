"""What the SGLang and vLLM grids share: one class per case from dcpctl's plan and the engine's own verdict.

    crash                           dcpctl exited on an error of its own
    <engine>_rejects_dcpctl_accepts the engine refuses what dcpctl calls valid
    agree_reject / agree_accept     both refuse / both accept with the same resolved settings
    dcpctl_rejects_explained        only dcpctl refuses, for checks the engine's arguments cannot see
    dcpctl_rejects_unexplained      only dcpctl refuses, for any other reason
    differs                         both accept, with other resolved settings
"""
from __future__ import annotations

import collections
import json
from typing import Any, Callable


def classify(d: dict[str, Any], e: dict[str, Any], engine: str, extra_checks: Any,
             diffs: Callable[[dict[str, Any], dict[str, Any]], dict[str, Any]]) -> tuple[str, Any]:
    """`d` from a grid's run_dcpctl, `e` its engine verdict; diffs(dcpctl's resolved, the engine's values)."""
    if "crash" in d:
        return "crash", d["crash"]
    if d["valid"] and not e["accepted"]:
        return f"{engine}_rejects_dcpctl_accepts", e["error"]
    if not d["valid"] and not e["accepted"]:
        return "agree_reject", None
    if not d["valid"]:
        if "user_error" in d:
            return "dcpctl_rejects_unexplained", d["user_error"]
        odd = [v for v in d["violations"] if v["code"] not in extra_checks]
        return ("dcpctl_rejects_unexplained", odd) if odd else ("dcpctl_rejects_explained",
                                                                 [v["code"] for v in d["violations"]])
    found = diffs(d["resolved"], e["values"])
    return ("differs", found) if found else ("agree_accept", None)


def print_classes(cases: list[dict[str, Any]], counts: Any, failures: tuple[str, ...], show: int) -> None:
    """The classes per case group, the totals, and up to `show` examples of each failure (with its
    command)."""
    by_group: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    for c in cases:
        by_group[c["group"]][c["class"]] += 1
    for g, cnt in by_group.items():
        print(f"  {g:<12} {sum(cnt.values()):>5}  " + ", ".join(f"{k} {v}" for k, v in sorted(cnt.items())))
    for k in ("agree_accept", "agree_reject", "dcpctl_rejects_explained", *failures):
        print(f"{k:<32} {counts[k]:>5}")
    for f in failures:
        seen: collections.Counter = collections.Counter()
        for c in cases:
            if c["class"] != f:
                continue
            why = json.dumps(c["detail"], default=str)[:200]
            seen[why] += 1
            if seen[why] <= show:
                print(f"  [{f}] {why}\n      dcpctl plan {' '.join(c['flags'])}")
        for why, n in seen.most_common():
            print(f"  [{f}] x{n}: {why}")
