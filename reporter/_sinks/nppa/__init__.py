"""The ``nppa`` sink: the national anti-addiction interface's behaviour reports."""
