'use strict';
// Against a real server: what lands where, through a lost reply, a Redis that goes away and
// comes back, a writer id another process uses, another protocol version, an exit without
// close().
const assert = require('node:assert/strict');
const { spawnSync } = require('node:child_process');
const path = require('node:path');
const { after, before, test } = require('node:test');
const { Collector } = require('../lib');
const { Writer } = require('../lib/writer');
const { Server } = require('./server');
const { ReplyDropper } = require('./relay');

let server;
let client;

before(async () => {
  server = await new Server().start();
  client = server.client();
});

after(async () => {
  client.disconnect();
  await server.cleanup();
});

function collector(url, options = {}) {
  const { collector: c, ...rest } = options;
  return new Collector({
    redis: { url, key_prefix: 'node', shards: 4, socket_timeout_seconds: 1, connect_timeout_seconds: 1 },
    collector: { flush_interval_ms: 5, retry_max_delay_ms: 50, ...c },
    ...rest,
  }, { env: {}, log: () => {} });
}

// The script's ARGV of an EVALSHA command as the relay saw it (RESP: an array of bulk strings).
function argv(data) {
  const parts = [];
  let pos = data.indexOf('\r\n') + 2;
  while (pos < data.length) {
    const end = data.indexOf('\r\n', pos);
    const size = Number(data.subarray(pos + 1, end).toString());
    parts.push(data.subarray(end + 2, end + 2 + size).toString());
    pos = end + 2 + size + 2;
  }
  return parts.slice(3 + Number(parts[2]));
}

async function stored(game) {
  const shard = collector(server.url).schema.shardOf(game);
  return (await client.lrange(`{node:${shard}}:q:${game}`, 0, -1)).map((e) => JSON.parse(e.slice(13)));
}

test('events land in the game\'s shard, in order, the game registered, the counts reported', async () => {
  await client.flushall();
  const t = collector(server.url);
  for (let n = 0; n < 20; n += 1) t.collect('alpha', { n });
  t.collect('alpha', { pad: 'x'.repeat(40000) }); // over the default 32768: counted
  assert.equal(await t.flush(5000), true);
  assert.deepEqual(await stored('alpha'), Array.from({ length: 20 }, (_, n) => ({ n })));
  const shard = t.schema.shardOf('alpha');
  assert.equal(await client.sismember(`{node:${shard}}:active`, 'alpha'), 1);
  assert.equal(await client.zscore(`{node:${shard}}:games`, 'alpha'), '0');
  const counters = await client.hgetall(`{node:${shard}}:stats`);
  assert.equal(counters.stored, '20');
  assert.equal(counters.dropped_too_large, '1');
  assert.equal(t.stats().stored, 20);
  await t.close();
});

test('a write whose reply was lost is sent again as it was, and stored once', async () => {
  await client.flushall();
  const relay = await new ReplyDropper(server.port).listen();
  const t = collector(relay.url);
  t.collect('warm', { n: 0 });
  assert.equal(await t.flush(5000), true); // connected, the script loaded
  relay.armed = true;
  for (let n = 0; n < 5; n += 1) t.collect('lost', { n });
  assert.equal(await t.flush(5000), true);
  assert.equal(relay.dropped, 1);
  assert.deepEqual(await stored('lost'), Array.from({ length: 5 }, (_, n) => ({ n })));
  const sent = relay.evalshas.filter((d) => d.includes('"n":4')).map(argv);
  assert.equal(sent.length, 2); // the lost one, then the same write again
  // The same write: all its arguments but the identity it offers a shard without one.
  const IDENTITY = 7;
  assert.deepEqual(sent[1].filter((_, i) => i !== IDENTITY), sent[0].filter((_, i) => i !== IDENTITY));
  assert.equal(t.stats().stored, 6);
  await t.close();
  await relay.close();
});

test('while Redis is away events wait and collect() never throws; they are stored once it is back', async () => {
  await client.flushall();
  const t = collector(server.url);
  t.collect('away', { n: -1 });
  assert.equal(await t.flush(5000), true);
  await server.stop();
  for (let n = 0; n < 10; n += 1) t.collect('away', { n });
  assert.equal(await t.flush(300), false);
  assert.ok(t.stats().backend_errors >= 1);
  assert.equal(t.stats().buffered, 10);
  await server.start(); // the same port, empty
  assert.equal(await t.flush(10000), true);
  assert.deepEqual(await stored('away'), Array.from({ length: 10 }, (_, n) => ({ n })));
  await t.close();
});

test('a shard that knows the writer id with other writes: refused, counted, sent again under a new id', async () => {
  await client.flushall();
  const first = collector(server.url);
  first.collect('same', { from: 'first' });
  assert.equal(await first.flush(5000), true);
  const second = collector(server.url);
  const writer = second.getWriter();
  writer.writerId = first.writer.writerId; // a cloned process: the same id, numbered from 1
  second.collect('same', { from: 'second' });
  assert.equal(await second.flush(5000), true);
  assert.deepEqual(await stored('same'), [{ from: 'first' }, { from: 'second' }]);
  assert.equal(second.stats().refused_repeats, 1);
  assert.equal(second.stats().refused_writes, 1);
  assert.notEqual(writer.writerId, first.writer.writerId);
  await first.close();
  await second.close();
});

test('a script of another protocol version refuses the writes for good: counted, kept', async () => {
  await client.flushall();
  const t = collector(server.url);
  const writer = t.getWriter();
  const callArgs = Writer.prototype.callArgs;
  writer.callArgs = (...args) => [...callArgs.apply(writer, args).slice(0, -1), 2];
  t.collect('versioned', { n: 1 });
  assert.equal(await t.flush(300), false);
  assert.ok(t.stats().refused_writes >= 1);
  assert.equal(t.stats().stored, 0);
  assert.equal(t.stats().buffered, 1);
  assert.deepEqual(await stored('versioned'), []);
  await t.close(0);
  assert.equal(t.stats().dropped_at_close, 1);
});

test('Redis at maxmemory refuses the writes: counted in refused_oom, kept, stored once it has room', async () => {
  await client.flushall();
  await client.set('ballast', 'x'.repeat(4 * 1024 * 1024));
  const t = collector(server.url);
  try {
    await client.config('SET', 'maxmemory-policy', 'noeviction');
    await client.config('SET', 'maxmemory', '1mb');
    for (let n = 0; n < 5; n += 1) t.collect('full', { n });
    assert.equal(await t.flush(300), false);
    assert.ok(t.stats().refused_oom >= 5);
    assert.equal(t.stats().buffered, 5);
    assert.equal(t.stats().stored, 0);
  } finally {
    await client.config('SET', 'maxmemory', '0');
  }
  assert.equal(await t.flush(5000), true);
  assert.deepEqual(await stored('full'), Array.from({ length: 5 }, (_, n) => ({ n })));
  await t.close();
});

test('a process that ends without close() writes its buffer first', async () => {
  await client.flushall();
  const script = `
    const { Collector } = require(${JSON.stringify(path.resolve(__dirname, '..', 'lib'))});
    const t = new Collector({ redis: { url: ${JSON.stringify(server.url)}, key_prefix: 'node', shards: 4 },
      collector: { flush_interval_ms: 60000 } }, { env: {} });
    t.collect('exit', { n: 1 });
    t.collect('exit', { n: 2 });`;
  const done = spawnSync(process.execPath, ['-e', script], { timeout: 20000, encoding: 'utf8' });
  assert.equal(done.status, 0, done.stderr);
  assert.deepEqual(await stored('exit'), [{ n: 1 }, { n: 2 }]);
});
