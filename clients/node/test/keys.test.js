'use strict';
const assert = require('node:assert/strict');
const { test } = require('node:test');
const { KeySchema, checkGame, crc32, crc32js } = require('../lib/keys');

test('the shard rule: crc32 of the UTF-8 name, masked', () => {
  // zlib.crc32(b"game-1") == 0xf6c5bc7c (docs/protocol.md's example)
  assert.equal(crc32(Buffer.from('game-1')), 0xf6c5bc7c);
  assert.equal(crc32js(Buffer.from('game-1')), 0xf6c5bc7c);
  assert.equal(new KeySchema('telemetry', 16).shardOf('game-1'), 12);
  assert.equal(new KeySchema('telemetry', 1).shardOf('game-1'), 0);
});

test('the table CRC agrees with zlib on many inputs, and chains like it', () => {
  for (let n = 0; n < 300; n += 1) {
    const data = Buffer.from(`x${'é'.repeat(n % 7)}${n}`);
    assert.equal(crc32js(data), crc32(data));
  }
  const head = Buffer.from('head');
  const body = Buffer.from('body');
  assert.equal(crc32js(body, crc32js(head)), crc32(Buffer.concat([head, body])));
});

test('the keys of a game: the hash tag first, in the header order', () => {
  const keys = new KeySchema('p', 4).collectKeys('g', 3);
  assert.deepEqual(keys, ['{p:3}:q:g', '{p:3}:active', '{p:3}:games', '{p:3}:stats',
    '{p:3}:marker', '{p:3}:quarantine', '{p:3}:writes', '{p:3}:writers', '{p:3}:seen:g']);
});

test('game names: 1 to 128 of [A-Za-z0-9_.:@/-]', () => {
  for (const good of ['a', 'A'.repeat(128), 'x-y_z.0:1@2/3']) assert.equal(checkGame(good), good);
  for (const bad of ['', 'a'.repeat(129), '{tag}', 'café', 'a b', 'semi;colon']) {
    assert.throws(() => checkGame(bad), { name: 'TypeError', message: /invalid game name/ });
  }
  for (const notString of [null, undefined, 3, ['a']]) {
    assert.throws(() => checkGame(notString), { name: 'TypeError', message: /must be a string/ });
  }
});
