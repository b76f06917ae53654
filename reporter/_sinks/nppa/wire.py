"""The anti-addiction interface's wire format: the sealed body and the signature.

- Body: the plain JSON is sealed with AES-128-GCM, the key being the 16 bytes the 32-hex
  secret stands for, a fresh random 12-byte nonce per request; the wire body is
  ``{"data": base64(nonce || ciphertext || 16-byte tag)}``.
- Signature: lowercase hex sha256 of the secret, then the name and value of every header
  signed (appId, bizId, timestamps) and query parameter, sorted by name, then the wire body.

The secret is hex: AES reads the 16 bytes it stands for, whatever the case of its digits,
but the signature reads it as text, so ``ABCD...`` and ``abcd...`` would sign differently.
The system issues keys in lower case (the interface description's worked example, and the
sample keys of public clients), so the signature always uses the lower-case spelling: a key
copied in upper case (a hex dump, a secret store that upper-cases) signs as issued.
"""

from __future__ import annotations

import base64
import hashlib
import os
from collections.abc import Mapping

import orjson
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

NONCE_BYTES = 12
TAG_BYTES = 16


def seal(secret_key: str, plain: bytes) -> bytes:
    """The wire body carrying ``plain``."""
    nonce = os.urandom(NONCE_BYTES)
    sealed = AESGCM(bytes.fromhex(secret_key)).encrypt(nonce, plain, None)
    return orjson.dumps({"data": base64.b64encode(nonce + sealed).decode("ascii")})


def unseal(secret_key: str, wire: bytes) -> bytes:
    """The plain body a wire body carries (for tests and diagnosis); raises ``ValueError``
    when it is not one, or the key does not open it."""
    try:
        data = base64.b64decode(orjson.loads(wire)["data"], validate=True)
        return AESGCM(bytes.fromhex(secret_key)).decrypt(
            data[:NONCE_BYTES], data[NONCE_BYTES:], None
        )
    except Exception as exc:  # JSON, base64, key or tag: all mean "not ours"
        raise ValueError(f"not a body sealed with this key: {type(exc).__name__}") from None


def signature(secret_key: str, signed: Mapping[str, str], body: bytes) -> str:
    """``sign`` for a request whose signed headers and query parameters are ``signed``."""
    text = "".join(name + signed[name] for name in sorted(signed))
    return hashlib.sha256(secret_key.lower().encode() + text.encode() + body).hexdigest()
