#!/usr/bin/env node
'use strict';
// This package as a producer of the conformance suite's line protocol (docs/protocol.md,
// "The conformance suite"):
//
//   telemetry-reporter conformance -- node clients/node/bin/conformance-producer.js
//
// One request per line on standard input, one answer per line on standard output:
// "collect <game> <event-json>" (ok, or "refused <reason>" when collect() throws), "flush"
// (ok once flush() says everything is in Redis), "stats" (stats() as one line of JSON),
// "close" (ok, then exit 0). Settings from TELEMETRY_<SECTION>_<KEY> variables; logs go to
// standard error. Requests are answered in order, one at a time.

let Collector;
try {
  ({ Collector } = require('../lib'));
} catch (exc) {
  if (exc.code !== 'MODULE_NOT_FOUND') throw exc;
  process.stderr.write(`conformance-producer: ${exc.message.split('\n')[0]}: run npm ci in `
    + `${require('node:path').resolve(__dirname, '..')} first\n`);
  process.exit(2);
}

// How long one "flush" request waits for the buffer to reach Redis before it answers an error.
const FLUSH_MS = 60000;

async function answer(telemetry, line) {
  const space = line.indexOf(' ');
  const verb = space < 0 ? line : line.slice(0, space);
  const rest = space < 0 ? '' : line.slice(space + 1);
  if (verb === 'collect') {
    const gap = rest.indexOf(' ');
    const game = gap < 0 ? rest : rest.slice(0, gap);
    return collect(telemetry, game, gap < 0 ? '' : rest.slice(gap + 1));
  }
  if (verb === 'flush' && space < 0) {
    return (await telemetry.flush(FLUSH_MS))
      ? 'ok'
      : `error flush: not everything was stored within ${FLUSH_MS / 1000} s`;
  }
  if (verb === 'stats' && space < 0) return JSON.stringify(telemetry.stats());
  if (verb === 'close' && space < 0) {
    await telemetry.close();
    return 'ok';
  }
  return `error unknown request ${JSON.stringify(line.slice(0, 80))}`;
}

function collect(telemetry, game, text) {
  let event;
  try {
    event = JSON.parse(text);
  } catch (exc) {
    return `refused the event is not JSON: ${exc.message}`;
  }
  try {
    telemetry.collect(game, event);
  } catch (exc) {
    if (!(exc instanceof TypeError)) throw exc;
    return `refused ${exc.message.replace(/\s+/g, ' ')}`;
  }
  return 'ok';
}

// The requests, one line each, in order: a line is answered once the one before it was.
async function* requests(input) {
  let rest = '';
  input.setEncoding('utf8');
  for await (const chunk of input) {
    rest += chunk;
    let end;
    while ((end = rest.indexOf('\n')) >= 0) {
      yield rest.slice(0, end).replace(/\r$/, '');
      rest = rest.slice(end + 1);
    }
  }
}

async function serve() {
  const telemetry = new Collector();
  for await (const line of requests(process.stdin)) {
    process.stdout.write(`${await answer(telemetry, line)}\n`);
    if (line === 'close') {
      process.stdin.destroy();
      return 0;
    }
  }
  await telemetry.close();
  return 0;
}

serve().then(
  (code) => { process.exitCode = code; },
  (exc) => {
    process.stderr.write(`conformance-producer: ${exc.stack || exc}\n`);
    process.exitCode = 1;
  },
);
