"""The plan's Performance table: DCP off against the planned DCP, each figure with its label, then the
sources."""
from __future__ import annotations

from typing import Any

from dcpctl import console

# row name -> (figure key, unit format)
ROWS = (("max concurrency", "max_concurrency", "{:,.0f}"),
        ("decode compute (ms)", "decode_compute_ms", "{:.2f}"),
        ("communication (ms)", "communication_ms", "{:.2f}"), ("host gap (ms)", "host_gap_ms", "{:.3f}"),
        ("TPOT (ms)", "tpot_ms", "{:.2f}"), ("TTFT (ms)", "ttft_ms", "{:,.0f}"),
        ("output tok/s per GPU", "output_tok_s_per_gpu", "{:,.0f}"))


def _cell(f: dict[str, Any] | None, fmt: str) -> str:
    if not f:
        return "-"
    if "low" in f and f["low"] != f["high"]:
        return f"{fmt.format(f['value'])} ({fmt.format(f['low'])}-{fmt.format(f['high'])})"
    return fmt.format(f["value"])


def _names(perf: dict[str, Any]) -> dict[str, str]:
    w = perf["workload"]
    conc = [c.get("concurrency") for c in perf["columns"] if c.get("concurrency")]
    n = f"{w['concurrency']}" + (f" (as fits: {', '.join(map(str, conc))})" if any(c != w["concurrency"]
                                                                                   for c in conc) else "")
    return {"max_concurrency": f"max concurrency at {w['max_context']:,} tokens",
            "tpot_ms": f"TPOT (ms) at context {w['decode_context']:,}, {n} requests",
            "ttft_ms": f"TTFT (ms), {w['input_len']:,}-token prompt",
            "output_tok_s_per_gpu": f"output tok/s per GPU, {n} requests"}


def render_performance(perf: dict[str, Any] | None) -> None:
    """The table (one column per deployment, the label of each figure), and where each labelled figure came
    from."""
    if not perf:
        return
    if "unavailable" in perf:
        console.out.print(f"[bold]Performance[/]: none ({perf['unavailable']})", soft_wrap=True)
        return
    cols = perf["columns"]
    names = _names(perf)
    rows, sources = [], {}
    for name, key, fmt in ROWS:
        figs = [c.get(key) for c in cols]
        label = next((f["label"] for f in reversed(figs) if f), "")
        rows.append([names.get(key, name), *[_cell(f, fmt) for f in figs], label])
        for f in figs:
            if f:
                sources.setdefault(f"{f['label']}: {f['source']}", None)
    w = perf["workload"]
    title = (f"Performance ({perf['predicts']}; {w['input_len']:,}-token prompts, {w['output_len']:,} output "
             "tokens; bands: the collectives' low-high)")
    console.out.print(console.table(title, ["", *[c["choice"] for c in cols], "label"], rows))
    for c in cols:
        if "unavailable" in c:
            console.out.print(f"  {c['choice']}: {c['unavailable']}", soft_wrap=True)
    for s in sources:
        console.out.print(f"  - {s}", soft_wrap=True)
