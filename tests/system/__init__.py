"""Whole-service scenarios: the SDK, the store and running reporters (services or processes)
together against an endpoint, most with a fault (a crash, a failover, a hung Redis, a hostile
peer), each checking what became of every event."""
