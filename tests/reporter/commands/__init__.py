"""Tests of ``reporter._commands``: the command line as users run it (``run``, ``status``,
``dead``, ``check-config``, its options and exit codes, SIGHUP)."""
