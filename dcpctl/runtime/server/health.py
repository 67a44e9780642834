"""GET /health as SGLang's health_generate does it: one generated token through the engine, with a timeout.

    503 with the reason     the engine failed, the server stops or is still starting (no probe needed)
    200 "ok"                the probe's token came back, or any step delivered tokens after the check began (a
                            busy engine proves itself without waiting behind the queue; SGLang does the same)
    503 "no token ..."      neither within the timeout: a rank that hangs holds every step of the lockstep
                            loop

The probe is a one-token greedy request on token id 0 with a negative id (bridge.py): it runs through
every rank of its replica like any request but is never counted in /metrics, and it is cancelled when
the check gives up, so a stopped rank that resumes does not leave it behind.
"""
from __future__ import annotations

import asyncio
import time

from dcpctl.runtime.engine.request import SamplingParams
from dcpctl.runtime.server.bridge import Bridge, EngineDead, Failure, Overloaded

PROBE = SamplingParams(max_new_tokens=1, temperature=0.0, ignore_eos=True)
POLL_S = 0.25    # how often a waiting check looks whether other requests' tokens arrived


def static_reason(bridge: Bridge) -> str | None:
    """Why the server cannot serve at all right now, without asking the engine; None when it may."""
    if bridge.error is not None:
        return f"engine failed: {bridge.error}"
    if bridge.stop_requested:
        return "shutting down"
    if bridge.starting:
        return "starting: the other HTTP workers are not up yet"
    return None


async def probe(bridge: Bridge, timeout_s: float) -> str | None:
    """None when the engine generated within `timeout_s`, else a short reason."""
    tic = time.monotonic()
    try:
        rid, q = bridge.open([0], PROBE, probe=True)
    except Overloaded:      # every request slot is taken: only other requests' tokens can answer
        rid, q = None, asyncio.Queue()
    except EngineDead as e:
        return str(e)
    try:
        while (left := tic + timeout_s - time.monotonic()) > 0:
            try:
                item = await asyncio.wait_for(q.get(), min(POLL_S, left))
            except asyncio.TimeoutError:
                if bridge.last_output > tic:
                    return None
                continue
            if isinstance(item, Failure):
                return f"engine failed: {item.message}"
            return None if item.finish != "abort" else "the engine refused the health probe"
        return (f"no token within {timeout_s:g} s (health check timeout): a rank may be hung or a step is "
                "taking that long")
    finally:
        if rid is not None:
            bridge.cancel(rid)
