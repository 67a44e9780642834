"""Serving: control-plane messages (all ranks), the lockstep engine loop, and rank 0's HTTP API.

control.py  the per-step control message as int64/float64 tensors (no pickled objects)
loop.py     every rank's engine loop; rank 0 reads its inbox, the others follow the broadcast
bridge.py   thread-safe hand-over between the HTTP thread (asyncio) and the engine (main thread)
app.py      FastAPI routes: OpenAI completions/chat, models, health, metrics, SGLang /generate
"""
