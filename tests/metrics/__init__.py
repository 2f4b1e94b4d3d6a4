"""Tests of the pure metrics engine: parser, vLLM names, window math."""
