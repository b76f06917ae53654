'use strict';
// The collect script as this package ships it: lua/collect.lua, the expansion of the
// repository's lua/collect.lua and its parts (scripts/build-lua.js makes it; a test checks it
// is the same text the Python SDK loads, so both have one SHA-1).

const crypto = require('node:crypto');
const fs = require('node:fs');
const path = require('node:path');

// The producer protocol version this package speaks: the collect call's last argument.
const PROTOCOL_VERSION = 1;

const TEXT = fs.readFileSync(path.join(__dirname, '..', 'lua', 'collect.lua'), 'utf8');
const SHA = crypto.createHash('sha1').update(TEXT, 'utf8').digest('hex');

module.exports = { PROTOCOL_VERSION, TEXT, SHA };
