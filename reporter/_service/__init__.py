"""The running service: one process's workers, their threads, and how it stops.

- ``graph``: the one builder of the reporter's graph (``build_core``, ``build_jobs``), for the
  service, the demo and the tests alike.
- ``service``: ``ReporterService`` runs a graph: starts its jobs, re-reads secrets, stops.
- ``scheduling``: the APScheduler pools and the "run again after each run" rule.
- ``workers``: ``ShardSweeper``, ``HotGameWorker``, ``Reaper``, ``LeaseKeeper``, each one
  bounded ``loop()``.
- ``ownership``: shard leases (which process sweeps which shard).
- ``store_watch``: notices a shard whose Redis data was lost.
- ``stopping``: the bounded stop's Redis calls.
- ``probing``: the jobs of a held sender (its probes) and of secrets read from files.
- ``reloading``: SIGHUP's re-read of the config file, for what the sink takes at run time.

May import monitoring, delivery, pacing, the config, sinks (the registry and the ``Sink``
they answer to), senders, http and the ground floor (``_constants``, ``_exceptions``,
``_logging``, ``_tables``); the demo and the commands import it.
"""
