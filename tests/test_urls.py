"""Target URL identity and redaction (exporter/urls.py), case by case: the spellings issue 22
names (scheme and host case, default port, fragment) are one endpoint, and no secret of a URL
survives in what is shown."""

from __future__ import annotations

import pytest

from exporter.urls import BadUrl, label, normalise, redact, scrub

SAME = [
    ("http://h:8000/metrics", "http://h:8000/metrics#frag"),
    ("http://h:8000/metrics", "HTTP://H:8000/metrics"),
    ("http://h/metrics", "http://h:80/metrics"),
    ("https://h/metrics", "HTTPS://H:443/metrics#x"),
    ("http://h/", "http://h"),
    ("http://[::1]:8000/metrics", "http://[::1]:8000/metrics#y"),
]
APART = [
    ("http://h:8000/metrics", "http://h:8001/metrics"),
    ("http://h/metrics", "https://h/metrics"),
    ("http://h:443/metrics", "https://h:443/metrics"),
    ("http://h/metrics?a=1", "http://h/metrics?a=2"),
    ("http://h/metrics", "http://h/Metrics"),  # paths are case-sensitive
]


@pytest.mark.parametrize(("a", "b"), SAME)
def test_spellings_of_one_endpoint_normalise_alike(a: str, b: str) -> None:
    assert normalise(a) == normalise(b)


@pytest.mark.parametrize(("a", "b"), APART)
def test_different_endpoints_stay_apart(a: str, b: str) -> None:
    assert normalise(a) != normalise(b)


@pytest.mark.parametrize("url", [
    "http://[::1/metrics", "ftp://h/metrics", "http:///metrics", "http://h:99999/metrics",
    "http://h /metrics", "h:8000/metrics",
])
def test_malformed_urls_are_refused_with_the_url_redacted(url: str) -> None:
    with pytest.raises(BadUrl):
        normalise(url)
    with pytest.raises(BadUrl) as raised:
        normalise(url.replace("://", "://user:hunter2@", 1) + "?token=s3cr3t")
    assert "hunter2" not in str(raised.value) and "s3cr3t" not in str(raised.value)


def test_secrets_are_redacted_in_every_shown_form() -> None:
    url = "http://alice:hunter2@h:8000/metrics?token=s3cr3t&x=1#frag"
    assert redact(url) == "http://<secret>@h:8000/metrics?token=<secret>&x=1"
    assert label(url) == "http://h:8000/metrics?token=<secret>&x=1"
    message = f"GET {url} failed: s3cr3t rejected for alice:hunter2"
    assert "hunter2" not in scrub(message, url) and "s3cr3t" not in scrub(message, url)


@pytest.mark.parametrize("name", [
    "token", "access_token", "api_key", "apiKey", "key", "password", "passwd", "pwd",
    "client_secret", "X-Amz-Signature", "sig", "auth", "credentials", "session_id", "jwt",
])
def test_secret_query_parameters_are_redacted_by_name(name: str) -> None:
    url = f"http://h/metrics?{name}=s3cr3t-value&engine=a"
    assert label(url) == f"http://h/metrics?{name}=<secret>&engine=a"
    assert "s3cr3t-value" not in scrub(f"GET {url}: s3cr3t-value refused", url)


def test_other_query_values_tell_targets_apart() -> None:
    """Two engines behind one proxy, told apart by ``?engine=``: two labels ([fair])."""
    assert label("http://p/metrics?engine=a") != label("http://p/metrics?engine=b")
    assert label("http://p/metrics?token=a") == label("http://p/metrics?token=b")
