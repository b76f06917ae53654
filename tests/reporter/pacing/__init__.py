"""Tests of ``reporter._pacing``: the claim limiters, the request slots, the hold, the gate and
the learned body limit."""
