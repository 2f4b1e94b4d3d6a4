"""The PromQL builders live in console.metrics.promql (pure, beside the vLLM names they read); this name
stays for the modules that still import them from here."""

from console.metrics.promql import *  # noqa: F403
