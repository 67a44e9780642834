"""Host cost of reading a sequence's tokens the way one decode step does, old form against new (CPU only).

Per running sequence a step reads its input token, its token count and its input slice. `Sequence.tokens`
builds prompt + output as a new list each time (O(length)); `token`, `num_tokens` and `token_slice` do not.
Prints microseconds per step for B sequences of PROMPT + OUTPUT tokens.

usage: PYTHONPATH=. python3 benchmarks/seq_tokens.py [--batch 32] [--prompt 1000] [--output 64]
"""
from __future__ import annotations

import argparse
import time

from dcpctl.runtime.engine.request import SamplingParams, Sequence


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--prompt", type=int, default=1000)
    ap.add_argument("--output", type=int, default=64)
    ap.add_argument("--reps", type=int, default=2000)
    a = ap.parse_args()
    seqs = [Sequence(i, list(range(a.prompt)), SamplingParams(max_new_tokens=a.output)) for i in range(a.batch)]
    for s in seqs:
        s.output = list(range(a.output))
    last = a.prompt + a.output - 1

    def whole_list() -> None:
        for s in seqs:
            s.tokens[last], len(s.tokens), s.tokens[last:last + 1]

    def accessors() -> None:
        for s in seqs:
            s.token(last), s.num_tokens, s.token_slice(last, last + 1)
    for f in (whole_list, accessors):
        t0 = time.perf_counter()
        for _ in range(a.reps):
            f()
        print(f"{f.__name__}: {(time.perf_counter() - t0) / a.reps * 1e6:.1f} us per step of {a.batch} sequences "
              f"of {a.prompt + a.output} tokens")


if __name__ == "__main__":
    main()
