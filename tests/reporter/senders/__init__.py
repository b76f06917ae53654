"""Tests of ``reporter._senders``: the HTTP client every sender uses (TLS, proxies), outcomes,
error reasons and secret files."""
