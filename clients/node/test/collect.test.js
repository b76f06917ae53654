'use strict';
// collect() on the caller's path, with no server: what it refuses, what it counts, the
// buffer's bounds. A collector that would write is pointed at a port nobody listens on.
const assert = require('node:assert/strict');
const { test } = require('node:test');
const { Collector, COUNTERS, LEVELS } = require('../lib');
const { holdsLoneSurrogate } = require('../lib/collector');

const NOWHERE = { redis: { url: 'redis://127.0.0.1:1/0', connect_timeout_seconds: 0.05 } };

function quiet(options = {}) {
  return new Collector({ ...NOWHERE, ...options }, { env: {}, log: () => {} });
}

test('stats() has every name of the Python SDK\'s, all 0 at first', () => {
  const t = quiet();
  assert.deepEqual(Object.keys(t.stats()).sort(), [...COUNTERS, ...LEVELS].sort());
  assert.ok(Object.values(t.stats()).every((n) => n === 0));
  t.close(0);
});

test('a bad game name or an event that is not a JSON object is refused, nothing taken', () => {
  const t = quiet();
  for (const game of ['', '{x}', 'a b', null, 42]) {
    assert.throws(() => t.collect(game, { a: 1 }), TypeError);
  }
  const cyclic = {};
  cyclic.self = cyclic;
  const notObject = { toJSON: () => 'text' };
  for (const event of [null, [1, 2], 'text', 3, true, undefined, cyclic, { n: 10n }, notObject,
    { bad: 'lone \ud800 surrogate' }]) {
    assert.throws(() => t.collect('game', event), TypeError, String(event));
  }
  assert.equal(t.stats().accepted, 0);
  assert.equal(t.stats().buffered, 0);
  t.close(0);
});

test('collect() returns before any I/O, and never throws for Redis trouble', async () => {
  const t = quiet();
  for (let n = 0; n < 100; n += 1) assert.equal(t.collect('game', { n }), undefined);
  assert.equal(t.stats().accepted, 100);
  assert.equal(t.stats().buffered, 100);
  assert.equal(await t.flush(300), false); // nobody listens: not stored, still buffered
  assert.ok(t.stats().backend_errors >= 1);
  const s = t.stats();
  assert.equal(s.accepted, s.stored + s.dropped_buffer_full + s.dropped_at_close + s.buffered);
  await t.close(50);
  assert.equal(t.stats().dropped_at_close, 100);
  assert.equal(t.stats().buffered, 0);
});

test('an event over max_event_bytes is counted, not refused; the bound is exact', () => {
  const t = quiet({ buffer: { max_event_bytes: 64 } });
  t.collect('g', { pad: 'x'.repeat(54) }); // 64 bytes of JSON
  t.collect('g', { pad: 'x'.repeat(55) }); // 65
  t.collect('g', { pad: 'é'.repeat(27) }); // 64 bytes: 10 + 27 * 2
  t.collect('g', { pad: 'é'.repeat(28) }); // 66
  assert.equal(t.stats().accepted, 2);
  assert.equal(t.stats().dropped_too_large, 2);
  t.close(0);
});

test('a full buffer drops its oldest events and counts them', () => {
  const t = quiet({ collector: { max_buffer_events: 10 } });
  for (let n = 0; n < 25; n += 1) t.collect('g', { n });
  assert.equal(t.stats().dropped_buffer_full, 15);
  assert.equal(t.stats().buffered, 10);
  assert.deepEqual(t.buffer.entries.slice(t.buffer.head).map((e) => JSON.parse(e.slice(13)).n),
    [15, 16, 17, 18, 19, 20, 21, 22, 23, 24]);
  t.close(0);
});

test('the entry: 13 digits of the collect time, then the compact JSON', () => {
  const t = quiet();
  const before = Date.now();
  t.collect('g', { type: 'login', text: 'line\nbreak', n: 1.5 });
  const entry = t.buffer.entries[t.buffer.head];
  assert.match(entry, /^\d{13}\{/);
  assert.ok(Number(entry.slice(0, 13)) >= before && Number(entry.slice(0, 13)) <= Date.now());
  assert.equal(entry.slice(13), '{"type":"login","text":"line\\nbreak","n":1.5}');
  assert.ok(!entry.includes('\n'));
  t.close(0);
});

test('disabled: validated and counted, never sent', async () => {
  const t = quiet({ collector: { disabled: true } });
  t.collect('g', { a: 1 });
  assert.throws(() => t.collect('{bad}', { a: 1 }), TypeError);
  assert.equal(await t.flush(100), true);
  await t.close();
  assert.equal(t.stats().accepted, 1);
  assert.equal(t.stats().dropped_disabled, 1);
  assert.equal(t.redis, null);
});

test('after close(), events are counted as dropped_closed', async () => {
  const t = quiet();
  await t.close(0);
  t.collect('g', { a: 1 });
  assert.equal(t.stats().dropped_closed, 1);
  assert.equal(t.stats().accepted, 0);
});

test('lone surrogates are found, escaped backslashes are not', () => {
  assert.equal(holdsLoneSurrogate(JSON.stringify({ a: '\ud800' })), true);
  assert.equal(holdsLoneSurrogate(JSON.stringify({ a: '\udc00x' })), true);
  assert.equal(holdsLoneSurrogate(JSON.stringify({ a: '\ud83c\udfae' })), false);
  assert.equal(holdsLoneSurrogate(JSON.stringify({ a: '\\ud800' })), false);
  assert.equal(holdsLoneSurrogate(JSON.stringify({ a: '\u0001' })), false);
});

test('the buffer hands out its oldest events in slices, the rest kept in order', () => {
  const t = quiet({ collector: { max_buffer_events: 100 } });
  for (let n = 0; n < 30; n += 1) t.collect(n % 2 ? 'odd' : 'even', { n });
  const first = t.buffer.take(20);
  const numbers = (q) => q.entries.map((e) => JSON.parse(e.slice(13)).n);
  assert.deepEqual(numbers(first.queues.get('even')), [0, 2, 4, 6, 8, 10, 12, 14, 16, 18]);
  assert.equal(t.buffer.length, 10);
  const rest = t.buffer.take(20);
  assert.deepEqual(numbers(rest.queues.get('odd')), [21, 23, 25, 27, 29]);
  assert.equal(t.buffer.length, 0);
  assert.equal(t.buffer.bytes, 0);
  t.close(0);
});
