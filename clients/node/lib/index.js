'use strict';
// telemetry-collector-producer: game events from Node.js into the telemetry-collector Redis
// layout, as the producer protocol (docs/protocol.md of the repository) says.
//
//   const { Collector } = require('telemetry-collector-producer');
//   const telemetry = new Collector({ redis: { url: 'redis://cache:6379/0' } });
//   telemetry.collect('my-game', { type: 'login', player: 'p1' });   // no I/O, never awaits
//   await telemetry.close();                                          // at shutdown

const { Collector, COUNTERS, LEVELS } = require('./collector');
const { ConfigError } = require('./config');
const { PROTOCOL_VERSION } = require('./script');

module.exports = { Collector, ConfigError, PROTOCOL_VERSION, COUNTERS, LEVELS };
