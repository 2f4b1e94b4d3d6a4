"""Load generation and benchmarks against OpenAI-compatible servers."""
