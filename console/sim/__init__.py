"""A simulated vLLM fleet: engines that schedule like vLLM and step at the plan's roofline,
served over HTTP with vLLM's API and /metrics, driven by the plan's traffic, with faults on demand.

shape.py (plan -> replica quantities, via the planner), kv.py (paged KV blocks), engine.py
(one replica in simulated time), metrics.py + exposition.py (vLLM 0.32's /metrics page),
server.py (one replica over aiohttp), traffic.py (profile, arrivals, lengths, spikes),
faults.py, fleet.py (SimFleet), offline.py (an engine against a fixed stream, no server),
gpu.py (each replica's GPUs as dcgm-exporter shows them), gpu_calibration.py (the counter model's
factors) and gpu_fit.py (fitting them to a reading of a real GPU).
"""
