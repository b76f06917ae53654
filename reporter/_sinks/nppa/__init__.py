"""The ``nppa`` sink: the national anti-addiction interface's behaviour reports.

- ``sink``: ``NppaSink``, what the kind needs (slots of a shared rate, holds in scopes and
  their probes, the interface's window, a sealed body, the key file and its proof,
  ``--connect``'s empty report).
- ``routes``: each game's app (app id, base URL, key) and bizId, and the hold scopes a
  request of it can meet (the app, the key by its fingerprint, the game).
- ``settings``: the ``[nppa]`` section and its checks.
- ``sender``: ``NppaSender``, a batch as one signed, sealed report, and its answer read.
- ``wire``: the sealed body (AES-GCM) and the signature.
"""
