"""``telemetry-reporter conformance``: a producer of any language held to the producer
protocol (docs/protocol.md), against a real Redis, case by case.

- ``suite``: the command: the server, the cases in order, the verdicts, the exit code.
- ``cases_writes``, ``cases_faults``: the cases, with Redis up and through faults.
- ``world``: one case's Redis, settings and producers, and the checks every case ends with.
- ``producer``: the producer as a child process, spoken to one line at a time.
- ``relay``: a TCP relay that loses a reply, or a call, or cuts Redis off, on request.

The Python SDK's producer is ``python -m collector.conformance_producer`` (the SDK never
imports the reporter).  May import the demo's server and every layer below; only the
commands import it.
"""
