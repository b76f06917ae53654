"""The ``json`` sink: each batch POSTed to ``[sink] url`` as one JSON document."""
