"""The ``nppa`` sink: the national anti-addiction interface's behaviour reports.

- ``sink``: ``NppaSink``, what the kind needs (slots of a shared rate, a hold and its probe,
  the interface's window, a sealed body, the key file, ``--connect``'s empty report).
- ``settings``: the ``[nppa]`` section and its checks.
- ``sender``: ``NppaSender``, a batch as one signed, sealed report, and its answer read.
- ``wire``: the sealed body (AES-GCM) and the signature.
"""
