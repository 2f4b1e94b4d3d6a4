"""Targets given by a person: turned into /metrics URLs, or refused with one clear line."""

import pytest

from console.cli import main
from console.errors import UserError
from console.sources.base import metrics_url, targets_from


@pytest.mark.parametrize(
    "given, url",
    [
        ("10.0.0.5:8000", "http://10.0.0.5:8000/metrics"),
        ("http://10.0.0.5:8000/", "http://10.0.0.5:8000/metrics"),
        ("https://vllm.internal", "https://vllm.internal/metrics"),
        ("http://h:9/custom/metrics", "http://h:9/custom/metrics"),
        # A query string stays a query string: the path goes before it.
        ("http://127.0.0.1:18400?token=abc", "http://127.0.0.1:18400/metrics?token=abc"),
        ("[::1]:8000", "http://[::1]:8000/metrics"),
    ],
)
def test_metrics_url(given, url):
    assert metrics_url(given) == url


@pytest.mark.parametrize(
    "given, problem",
    [
        ("http://127.0.0.1:99999", "Port out of range"),
        ("http://[::1:8000", "Invalid IPv6 URL"),
        ("http://:8000", "no host"),
        ("ftp://x", "scheme 'ftp' is not http or https"),
        ("unix:///run/vllm.sock", "scheme 'unix' is not http or https"),
    ],
)
def test_unusable_target_is_a_user_error(given, problem):
    with pytest.raises(UserError) as error:
        targets_from([given])
    assert problem in str(error.value)
    assert "expected host:port" in str(error.value)


def test_watch_refuses_an_unusable_target_with_exit_2_and_one_line(capsys):
    assert main(["watch", "--target", "http://127.0.0.1:99999", "--once"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert "target 'http://127.0.0.1:99999'" in err


def test_watch_refuses_a_scheme_other_than_http_before_polling(capsys):
    """Not a DOWN row and exit 1: the address itself is wrong, so exit 2 with one line."""
    assert main(["watch", "--target", "ftp://x", "--once", "--interval", "0.2"]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err == "capcon watch: target 'ftp://x': scheme 'ftp' is not http or https; expected host:port or an http(s) URL such as http://10.0.0.5:8000\n"
