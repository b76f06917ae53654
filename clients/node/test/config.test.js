'use strict';
const assert = require('node:assert/strict');
const { test } = require('node:test');
const { loadConfig, ConfigError } = require('../lib/config');

test('defaults are the Python SDK\'s', () => {
  const c = loadConfig({}, {});
  assert.equal(c.redis.url, 'redis://127.0.0.1:6379/0');
  assert.equal(c.redis.key_prefix, 'telemetry');
  assert.equal(c.redis.shards, 16);
  assert.equal(c.buffer.max_events_per_game, 1000);
  assert.equal(c.buffer.ttl_seconds, 3600);
  assert.equal(c.buffer.max_event_bytes, 32768);
  assert.equal(c.collector.max_buffer_events, 100000);
  assert.equal(c.collector.flush_interval_ms, 50);
  assert.equal(c.collector.retry_max_delay_ms, 5000);
  assert.equal(c.collector.close_timeout_seconds, 5);
});

test('TELEMETRY_<SECTION>_<KEY> variables, in TOML syntax, under the options', () => {
  const env = {
    TELEMETRY_REDIS_URL: 'redis://cache:6380/2',
    TELEMETRY_REDIS_SHARDS: '8',
    TELEMETRY_REDIS_KEY_PREFIX: 'tele',
    TELEMETRY_BUFFER_MAX_EVENTS_PER_GAME: '1_000',
    TELEMETRY_COLLECTOR_CLOSE_TIMEOUT_SECONDS: '2.5',
    TELEMETRY_COLLECTOR_DISABLED: 'true',
    TELEMETRY_REPORTER_WORKERS: '8', // the reporter's: not read here
  };
  const c = loadConfig({ redis: { shards: 4 } }, env);
  assert.equal(c.redis.url, 'redis://cache:6380/2');
  assert.equal(c.redis.shards, 4);
  assert.equal(c.redis.key_prefix, 'tele');
  assert.equal(c.buffer.max_events_per_game, 1000);
  assert.equal(c.collector.close_timeout_seconds, 2.5);
  assert.equal(c.collector.disabled, true);
});

test('a bad value names where it came from', () => {
  const cases = [
    [{ TELEMETRY_REDIS_SHARDS: '12' }, /TELEMETRY_REDIS_SHARDS.*power of two/],
    [{ TELEMETRY_REDIS_SHARDS: 'many' }, /TELEMETRY_REDIS_SHARDS.*an integer \(TOML syntax\)/],
    [{ TELEMETRY_REDIS_KEY_PREFIX: 'a b' }, /key_prefix: expected 1 to 64/],
    [{ TELEMETRY_BUFFER_MAX_EVENT_BYTES: '10' }, /max_event_bytes: expected 64 to 524272, found 10/],
    [{ TELEMETRY_REDIS_URL: 'http://x' }, /url: expected a redis:\/\/ or rediss:\/\/ URL/],
    [{ TELEMETRY_BUFFER_TYPO: '1' }, /unknown key "typo" in \[buffer\]/],
    [{ TELEMETRY_CONFIG: 'x.toml' }, /reads no config file/],
    [{ TELEMETRY_COLLECTOR_MAX_BUFFER_BYTES: '65536', TELEMETRY_BUFFER_MAX_EVENT_BYTES: '40000' }, /at least twice \[buffer\] max_event_bytes/],
  ];
  for (const [env, message] of cases) {
    assert.throws(() => loadConfig({}, env), (exc) => exc instanceof ConfigError && message.test(exc.message), JSON.stringify(env));
  }
  assert.throws(() => loadConfig({ redis: { shard: 4 } }, {}), /options.redis: unknown key "shard"/);
  assert.throws(() => loadConfig({ buffer: { ttl_seconds: 0 } }, {}), /options.buffer.ttl_seconds: expected 1 to/);
});

test('what this producer cannot honour is refused, never ignored', () => {
  for (const env of [
    { TELEMETRY_REDIS_CLUSTER: 'true' },
    { TELEMETRY_REDIS_SENTINELS: '["10.0.0.1:26379"]' },
    { TELEMETRY_REDIS_WAIT_FOR_REPLICAS: '1' },
    { TELEMETRY_COLLECTOR_MODE: 'sync' },
    { TELEMETRY_BUFFER_DEDUP_FIELDS: '["si"]' },
  ]) {
    assert.throws(() => loadConfig({}, env), /not supported by the Node.js producer/, JSON.stringify(env));
  }
});

test('per-game overrides from the options', () => {
  const c = loadConfig({ games: { big: { max_events_per_game: 5000 } } }, {});
  assert.equal(c.games.get('big').max_events_per_game, 5000);
  assert.equal(c.games.get('big').ttl_seconds, 0);
  assert.throws(() => loadConfig({ games: { big: { cap: 1 } } }, {}), /unknown key "cap"/);
});
