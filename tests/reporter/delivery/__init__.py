"""Tests of ``reporter._delivery``: a batch's path (claim, deliver, attempt, settle), one call
at a time or under a running service."""
