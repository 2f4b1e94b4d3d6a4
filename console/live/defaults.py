"""How often fleets are polled and over what window, when the operator does not say: defined once."""

DEFAULT_INTERVAL_SECONDS = 2.0
# The console and the recorder: a faster refresh only burns the bastion's CPU (and the recorder's disk).
MIN_CONSOLE_INTERVAL_SECONDS = 1.0
# `watch --once`: two samples this far apart still give rates.
MIN_ONCE_INTERVAL_SECONDS = 0.2
DEFAULT_WINDOW_SECONDS = 60.0
# Per target (or per Prometheus query), unless --timeout: the interval, at most this.
MAX_DEFAULT_TIMEOUT_SECONDS = 5.0
DEFAULT_MAX_ANSWER_MB = 128  # console.sources.prometheus.DEFAULT_MAX_ANSWER_BYTES, without importing it for --help
