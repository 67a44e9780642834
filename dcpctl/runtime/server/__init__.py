"""Serving: the control plane every rank runs, and rank 0's OpenAI-compatible HTTP API.

control.py    the per-step control message as int64/float64 tensors (no pickled objects)
loop.py       every rank's lockstep loop: broadcast, apply, step, gather events to rank 0
serve.py      entry from the worker: load, start HTTP on rank 0, run the loop, stop cleanly
bridge.py     thread-safe hand-over between the HTTP thread (asyncio) and the engine (main thread)
http.py       uvicorn in a background thread on a pre-bound socket
app.py        FastAPI app: OpenAI-style errors, models/health/metrics
guard.py      ASGI middleware before any body is read: Host check, API key, body limit (413)
openai_api.py /v1/completions, /v1/chat/completions, SGLang /generate (plain and SSE)
gen.py        one request's validation, submission and token stream (aborted when its client goes)
limits.py     the server's context and KV limits (max_model_len) and the 400s that name them
health.py     GET /health: a one-token generation with a timeout, as SGLang's
protocol.py   request bodies (pydantic)       text.py  detokenization, stop strings, chat prompts
metrics.py    Prometheus registry
"""
