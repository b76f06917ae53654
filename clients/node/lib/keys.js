'use strict';
// Where a game's events go (docs/protocol.md, "Finding a game's shard and keys"): shard
// crc32(game) & (shards - 1), every key of a shard under the hash tag {<prefix>:<shard>}.

const zlib = require('node:zlib');

const GAME_NAME = /^[A-Za-z0-9_.:@/-]{1,128}$/;
const GAME_NAME_CHARS = 'A-Z a-z 0-9 _ - . : @ /';

// CRC-32 (IEEE), as zlib's: node:zlib's own where it has one (Node 20.15 and later).
const TABLE = new Int32Array(256).map((_, n) => {
  let c = n;
  for (let k = 0; k < 8; k += 1) c = c & 1 ? 0xedb88320 ^ (c >>> 1) : c >>> 1;
  return c;
});

function crc32js(data, value = 0) {
  let crc = ~value;
  for (let i = 0; i < data.length; i += 1) crc = TABLE[(crc ^ data[i]) & 0xff] ^ (crc >>> 8);
  return ~crc >>> 0;
}

const crc32 = typeof zlib.crc32 === 'function'
  ? (data, value = 0) => zlib.crc32(data, value)
  : crc32js;

// A game name as it goes into key names, or a TypeError saying what is wrong with it.
function checkGame(game) {
  if (typeof game !== 'string') {
    throw new TypeError(`game name must be a string, got ${game === null ? 'null' : typeof game}`);
  }
  if (!GAME_NAME.test(game)) {
    throw new TypeError(`invalid game name ${JSON.stringify(game.slice(0, 160))}: use 1 to 128 `
      + `characters from [${GAME_NAME_CHARS}]`);
  }
  return game;
}

class KeySchema {
  constructor(prefix, shards) {
    this.prefix = prefix;
    this.shards = shards;
    this.mask = shards - 1;
  }

  shardOf(game) {
    return crc32(Buffer.from(game, 'utf8')) & this.mask;
  }

  // The collect script's KEYS for `game`, in its header's order.
  collectKeys(game, shard) {
    const tag = `{${this.prefix}:${shard}}`;
    return [
      `${tag}:q:${game}`,
      `${tag}:active`,
      `${tag}:games`,
      `${tag}:stats`,
      `${tag}:marker`,
      `${tag}:quarantine`,
      `${tag}:writes`,
      `${tag}:writers`,
      `${tag}:seen:${game}`,
    ];
  }
}

module.exports = { KeySchema, checkGame, crc32, crc32js, GAME_NAME };
