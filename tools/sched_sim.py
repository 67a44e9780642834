"""What a prefill budget does to the MoE cell's ITL, from a step-cost model: a probe, not a measurement.

    python3 -m tools.sched_sim [--budgets 8192,2048,1024,512] [--decode-ms 7.5] [--token-us 35]
                               [--prefill-ms 10] [--split-ms 0,100] [--seeds 2]

The workload is serve_mixed.py's moe cell (160 requests, 1000 +- 50% prompt tokens, 64 +- 50% out, Poisson
40/s, at most 32 in flight); the scheduler is the engine's mixed steps (engine/scheduler.py: every running
decode plus prompt chunks, first come first served, up to the budget less the decodes).  A step costs, in ms:

    decode-ms (when it decodes) + token-us x prompt tokens / 1000 + prefill-ms (when it carries any)
    + split-ms (when it carries the later chunk of a split prompt)

The defaults are near the H200 step trace of the default-budget run (benchmarks/data/serve_mixed_h200.json,
the moe cell's steps by band: decode steps 7.6 ms, steps carrying up to 2,048 prompt tokens 41 ms); split-ms
stands for whatever a split prompt's later chunk costs beyond its tokens (a cuDNN plan build is the suspect).
Prints ITL p50 / p90 / p99, their ratio, requests/s and the median TTFT per budget and split cost.
"""
from __future__ import annotations

import argparse
import random
import statistics


def simulate(budget: int, decode_ms: float, token_us: float, prefill_ms: float, split_ms: float, seed: int,
             n: int = 160, conc: int = 32, rate: float = 40.0, prompt: int = 1000, out: int = 64) -> dict:
    rnd = random.Random(seed)
    arrivals, t = [], 0.0
    for _ in range(n):
        t += rnd.expovariate(rate)
        arrivals.append(t)
    prompts = [int(prompt * rnd.uniform(0.5, 1.5)) for _ in range(n)]
    outs = [max(1, int(out * rnd.uniform(0.5, 1.5))) for _ in range(n)]
    now, sent, in_flight, done = 0.0, 0, 0, 0
    waiting: list[list[int]] = []                  # [request, prompt tokens left, computed]
    running: dict[int, int] = {}                   # request -> tokens left to decode
    last: dict[int, float] = {}
    itl: list[float] = []
    ttft: list[float] = []
    sent_at: dict[int, float] = {}
    while done < n:
        while sent < n and in_flight < conc and arrivals[sent] <= now:
            waiting.append([sent, prompts[sent], 0])
            sent_at[sent], in_flight, sent = now, in_flight + 1, sent + 1
        if not waiting and not running:
            now = arrivals[sent]
            continue
        decodes = list(running)
        left, chunks, tokens, split = max(0, budget - len(decodes)), [], 0, False
        for w in waiting:
            if left <= 0:
                break
            take = min(w[1], left)
            chunks.append((w, take))
            left, tokens, split = left - take, tokens + take, split or w[2] > 0
        now += ((decode_ms if decodes else 0.0) + (token_us * tokens / 1e3 + prefill_ms if tokens else 0.0)
                + (split_ms if split else 0.0)) / 1e3
        for r in decodes:
            itl.append(now - last[r])
            last[r] = now
            running[r] -= 1
            if running[r] == 0:
                del running[r]
                done, in_flight = done + 1, in_flight - 1
        for w, take in chunks:
            w[1], w[2] = w[1] - take, w[2] + take
            if w[1] == 0:
                waiting.remove(w)
                ttft.append(now - sent_at[w[0]])
                last[w[0]] = now
                if outs[w[0]] > 1:
                    running[w[0]] = outs[w[0]] - 1
                else:
                    done, in_flight = done + 1, in_flight - 1
    itl.sort()
    q = lambda p: itl[int(p * (len(itl) - 1))] * 1e3    # noqa: E731
    return {"budget": budget, "split_ms": split_ms, "itl_p50_ms": q(0.5), "itl_p90_ms": q(0.9),
            "itl_p99_ms": q(0.99), "p99_over_p50": q(0.99) / q(0.5), "requests_per_s": n / now,
            "ttft_median_ms": statistics.median(ttft) * 1e3}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0], epilog=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--budgets", default="8192,2048,1024,512")
    ap.add_argument("--decode-ms", type=float, default=7.6)
    ap.add_argument("--token-us", type=float, default=35.0)
    ap.add_argument("--prefill-ms", type=float, default=10.0)
    ap.add_argument("--split-ms", default="0,100")
    ap.add_argument("--seeds", default="2")
    a = ap.parse_args(argv)
    print("budget split_ms  ITL p50 / p90 / p99 ms   p99/p50  req/s  TTFT median ms")
    for split in (float(x) for x in a.split_ms.split(",")):
        for b in (int(x) for x in a.budgets.split(",")):
            rows = [simulate(b, a.decode_ms, a.token_us, a.prefill_ms, split,
                             int(s)) for s in a.seeds.split(",")]
            m = {k: statistics.mean(r[k] for r in rows) for k in rows[0]}
            print(f"{b:6d} {split:8.0f}  {m['itl_p50_ms']:6.1f} / {m['itl_p90_ms']:6.1f} / "
                  f"{m['itl_p99_ms']:6.1f}   {m['p99_over_p50']:7.1f}  {m['requests_per_s']:5.1f}  "
                  f"{m['ttft_median_ms']:8.0f}")


if __name__ == "__main__":
    main()
