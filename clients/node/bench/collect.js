#!/usr/bin/env node
'use strict';
// One round of the repository's bench.producers for this package, in a process of its own: N
// collect() calls of the work file's events, then flush() until all are in Redis; one line of
// JSON with the figures on standard output. Settings from TELEMETRY_* variables.
//
//   node bench/collect.js WORK_FILE EVENTS

const fs = require('node:fs');
const { Collector } = require('../lib');

async function main([workFile, count]) {
  const pool = JSON.parse(fs.readFileSync(workFile, 'utf8'));
  const events = Number(count);
  const work = Array.from({ length: events }, (_, i) => pool[i % pool.length]);
  const telemetry = new Collector();
  for (const [game, event] of pool.slice(0, 200)) telemetry.collect(game, event);
  if (!(await telemetry.flush(60000))) throw new Error('warm-up: not stored within 60 s');
  const warm = telemetry.stats().stored;
  const cpu0 = process.cpuUsage();
  const t0 = process.hrtime.bigint();
  for (const [game, event] of work) telemetry.collect(game, event);
  const cpu1 = process.cpuUsage();
  const t1 = process.hrtime.bigint();
  const stored = await telemetry.flush(120000);
  const cpu2 = process.cpuUsage();
  const t2 = process.hrtime.bigint();
  const stats = telemetry.stats();
  await telemetry.close();
  const cpu = (a, b) => ((b.user + b.system) - (a.user + a.system)) * 1000; // µs -> ns
  process.stdout.write(`${JSON.stringify({
    calls: events,
    call_ns: Number(t1 - t0) / events,
    loop_cpu_ns: cpu(cpu0, cpu1) / events,
    cpu_ns_per_event: cpu(cpu0, cpu2) / events,
    stored_per_s: events / (Number(t2 - t0) / 1e9),
    stored: stored ? stats.stored - warm : -1,
    dropped: stats.dropped_buffer_full,
  })}\n`);
}

main(process.argv.slice(2)).catch((exc) => {
  process.stderr.write(`${exc.stack || exc}\n`);
  process.exitCode = 1;
});
