"""A page written with OpenMetrics-escaped names says `vllm_` in HELP and TYPE lines too: the family filter keeps them."""

from console.metrics.exposition import parse
from console.metrics.vllm import FAMILIES, sample_from_page

from .pages import V032_SMALL_KV, sample_text


def test_family_filter_reads_every_family_of_an_escaped_page():
    real = sample_text(V032_SMALL_KV)
    escaped = real.replace("vllm:", "vllm_")
    assert "# HELP vllm_num_requests_waiting" in escaped

    whole = sample_from_page(parse(real, FAMILIES), 0.0)
    renamed = sample_from_page(parse(escaped, FAMILIES), 0.0)
    assert renamed.waiting == whole.waiting and whole.waiting is not None
    assert renamed.running == whole.running
    assert renamed.counters == whole.counters and whole.counters
    assert renamed.histograms.keys() == whole.histograms.keys() and whole.histograms
