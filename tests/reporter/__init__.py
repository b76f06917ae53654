"""Tests of the reporter's ground floor (``_config``, ``_logging``, ``_settings``, the public
API) and of rules that hold across its packages; each package's tests in the folder of its name."""
