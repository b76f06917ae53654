#!/usr/bin/env node
'use strict';
// Copies the collect script into the package: lua/collect.lua of the repository with its
// "-- include: _<part>" lines expanded, exactly as collector/store/_scripts.py expands it (a
// part goes in once, where it is first included; a later include of it becomes a comment).
// The copy is what the package ships and loads; a test compares it with the Python SDK's.
//
//   node scripts/build-lua.js           write lua/collect.lua
//   node scripts/build-lua.js --check   exit 1 if lua/collect.lua is not the expansion

const fs = require('node:fs');
const path = require('node:path');

const SOURCE = path.resolve(__dirname, '..', '..', '..', 'lua');
const TARGET = path.resolve(__dirname, '..', 'lua', 'collect.lua');
const INCLUDE = /^-- include: (_[a-z_]+)$/gm;

function expand(name, included, dir = SOURCE) {
  const text = fs.readFileSync(path.join(dir, `${name}.lua`), 'utf8');
  return text.replace(INCLUDE, (_line, part) => {
    if (included.has(part)) return `-- (${part} is included above)`;
    included.add(part);
    return expand(part, included, dir).replace(/\n+$/, '');
  });
}

function main(argv) {
  const text = expand('collect', new Set());
  if (argv.includes('--check')) {
    const shipped = fs.existsSync(TARGET) ? fs.readFileSync(TARGET, 'utf8') : '';
    if (shipped !== text) {
      process.stderr.write(`${TARGET} is not the expansion of ${SOURCE}/collect.lua: run npm run build\n`);
      return 1;
    }
    return 0;
  }
  fs.writeFileSync(TARGET, text);
  return 0;
}

module.exports = { expand, SOURCE, TARGET };

if (require.main === module) process.exitCode = main(process.argv.slice(2));
