"""Tests of the simulated vLLM fleet (console/sim) and `capcon sim`."""
