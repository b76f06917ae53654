"""Secret values for the tests that check a secret is never shown: each long and unique enough
that no path, host name or version string can hold it, so the check cannot fail (or pass) by
chance.  A two-letter one, "pw", failed from a checkout whose path held "pw".

Letters, digits and hyphens only: each goes as it is into a URL's userinfo or query, a header,
a TOML string and an environment variable.
"""

from __future__ import annotations

TAG = "q7Zx4Kv9"


def secret(what: str) -> str:
    """``s3cret-<what>-q7Zx4Kv9``: ``secret("pw")``, ``secret("token")``, one per role."""
    return f"s3cret-{what}-{TAG}"
