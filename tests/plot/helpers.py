"""Plan documents and recommend results built in-process, the way the CLI builds them."""
from typing import Any

from dcpctl.cli.plan import build_plan, plan_document
from dcpctl.cli.recommend import constants_for
from dcpctl.plan.recommend import crossovers
from dcpctl.plan.recommend import recommend
from dcpctl.plan.resolve import merge_options, request_from_options

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def options(preset: str | None = None, **flags: Any) -> dict[str, Any]:
    return merge_options(flags, set(flags), preset)


def plan_doc(preset: str | None = None, **flags: Any) -> dict[str, Any]:
    opts = options(preset, **flags)
    return plan_document(build_plan(opts), opts)


def recommended(contexts: list[int], concurrency: int, preset: str | None = None, **flags: Any):
    opts = options(preset, **flags)
    req = request_from_options(opts)
    k = constants_for(req.hardware, req.topology.attn_tp)
    result = recommend(req, opts["context_len"], concurrency, k)
    result["crossovers"] = crossovers(req, k, contexts)
    return req, k, result
