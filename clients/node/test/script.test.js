'use strict';
const assert = require('node:assert/strict');
const fs = require('node:fs');
const { test } = require('node:test');
const { expand, SOURCE } = require('../scripts/build-lua');
const { TEXT, PROTOCOL_VERSION } = require('../lib/script');

test('the shipped script is the expansion of the repository\'s lua/collect.lua', () => {
  assert.ok(fs.existsSync(SOURCE), `${SOURCE}: run the tests from the repository`);
  assert.equal(TEXT, expand('collect', new Set()), 'lua/collect.lua is stale: run npm run build');
});

test('the script speaks the protocol version this package sends', () => {
  const [, spoken] = TEXT.match(/^local PROTOCOL_VERSION = '(\d+)'$/m);
  assert.equal(Number(spoken), PROTOCOL_VERSION);
});
