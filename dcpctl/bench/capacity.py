"""`dcpctl bench capacity`: how much context a fixed per-rank KV budget admits at each DCP size.

Real admission, no GPU: for each DCP size c an allocator of `budget` physical rows per rank (pages of
P) and the engine's scheduler; requests of `request_len` positions are queued until admission
stops (the scheduler admits while free virtual pages last).  Reported per c: requests admitted,
context held (their positions), the busiest rank's rows, and the longest single request the
scheduler accepts (c * budget: a request longer than the virtual capacity is refused).  Each
request wastes less than one widened page (P*c virtual slots = P rows per rank), so DCP c holds
c times the context of DCP 1 within one page per request.
"""
from __future__ import annotations

import json
from typing import Any

import click


def admit(budget: int, page: int, c: int, request_len: int) -> dict[str, Any]:
    """Queue requests of request_len positions until the scheduler stops admitting; what it holds."""
    from dcpctl.runtime.engine.request import SamplingParams, Sequence
    from dcpctl.runtime.engine.scheduler import Scheduler, SchedulerError
    from dcpctl.runtime.kv.allocator import VirtualAllocator, local_len
    alloc = VirtualAllocator(budget, page, c)
    sched = Scheduler(alloc, chunk_size=-1)
    params = SamplingParams.from_dict({"max_new_tokens": 1})
    rid = 0
    while True:
        sched.add(Sequence(rid, [1] * request_len, params))
        sched.next_batch()                       # admits while free virtual pages last
        if sched.waiting:
            break
        rid += 1
    held = [s.max_kv for s in sched.running]
    rows = [sum(local_len(n, r, c) for n in held) for r in range(c)]
    longest = alloc.virtual_capacity
    probe = Scheduler(VirtualAllocator(budget, page, c), chunk_size=-1)
    probe.add(Sequence(0, [1] * longest, params))           # fits exactly
    try:
        probe.add(Sequence(1, [1] * (longest + 1), params))
        refused = False
    except SchedulerError:
        refused = True
    return {"dcp": c, "budget_rows_per_rank": budget, "page_size": page, "request_len": request_len,
            "admitted": len(held), "context_held": sum(held), "max_rows_per_rank": max(rows),
            "min_rows_per_rank": min(rows),
            "free_pages_left": alloc.free_pages, "longest_request": longest, "longer_refused": refused}


def run(budget: int, page: int, dcps: list[int], request_len: int) -> list[dict[str, Any]]:
    rows = [admit(budget, page, c, request_len) for c in dcps]
    base = next((r for r in rows if r["dcp"] == 1), None)
    for r in rows:
        # every rank's unheld rows = the partial last page of each admitted request (<= P rows each)
        # + free pages too few for one more request + the budget's remainder below one page
        short = budget - r["min_rows_per_rank"] - r["free_pages_left"] * page - budget % page
        r["within_one_page_per_request"] = short <= r["admitted"] * page
        if base:
            r["context_vs_dcp1"] = r["context_held"] / base["context_held"]
    return rows


@click.command()
@click.option("--budget", type=click.IntRange(min=1), default=65536, show_default=True,
              help="Physical KV rows per rank (the same on every DCP size).")
@click.option("--page-size", "page", type=click.IntRange(min=1), default=64, show_default=True)
@click.option("--dcp-sizes", default="1,2,4", show_default=True)
@click.option("--request-len", type=click.IntRange(min=1), default=8000, show_default=True,
              help="Positions per request (prompt; one new token).")
@click.option("--format", "fmt", type=click.Choice(["table", "json"]), default="table", show_default=True)
def command(budget: int, page: int, dcp_sizes: str, request_len: int, fmt: str) -> None:
    """Admit requests at a fixed per-rank KV budget for each DCP size and report how much context fits.

    Runs the bundled scheduler and KV allocator on CPU (no model): queues requests of --request-len
    positions until admission stops, then reports requests admitted, context held and its ratio to
    DCP 1, the fullest rank and the longest single request that still fits.

    \b
    Examples:
      dcpctl bench capacity
      dcpctl bench capacity --budget 131072 --dcp-sizes 1,2,4,8 --request-len 32000 --format json
    """
    from dcpctl.plan.errors import positive_ints
    from dcpctl import console
    from dcpctl.plan.errors import UserError
    if budget < page:
        raise UserError(f"--budget ({budget}) < --page-size ({page})")
    rows = run(budget, page, positive_ints(dcp_sizes, "dcp-sizes"), request_len)
    if fmt == "json":
        console.write_text(json.dumps({"rows": rows}, indent=2))
        return
    cols = ["dcp", "admitted", "context held", "vs dcp1", "max rows/rank", "free pages", "longest request",
            "longer refused"]
    table = [[r["dcp"], r["admitted"], f"{r['context_held']:,}", f"{r.get('context_vs_dcp1', 0):.3f}",
              f"{r['max_rows_per_rank']:,}", r["free_pages_left"], f"{r['longest_request']:,}",
              str(r["longer_refused"])] for r in rows]
    console.out.print(console.table(f"capacity at {budget:,} rows/rank, page {page}, requests of "
                                    f"{request_len:,}",
                                    cols, table))
