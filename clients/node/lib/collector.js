'use strict';
// The producer: collect(game, event) on the caller's path (validation, JSON, a buffer append:
// no I/O, nothing awaited), and a writer that empties the buffer into Redis in the
// background, in rounds every flush_interval_ms, backing off while Redis fails.

const Redis = require('ioredis');
const { loadConfig } = require('./config');
const { EventBuffer } = require('./buffer');
const { KeySchema, checkGame } = require('./keys');
const { Writer } = require('./writer');

// The names of the Python SDK's stats(), in its order (docs/protocol.md, "Counters").
const COUNTERS = [
  'accepted', 'stored', 'evicted', 'merged', 'dropped_buffer_full', 'dropped_at_close',
  'dropped_too_large', 'dropped_closed', 'dropped_disabled', 'backend_errors', 'refused_oom',
  'flushes', 'store_resets', 'unreplicated_writes', 'refused_writes', 'refused_repeats',
];
const LEVELS = ['buffered', 'unconfirmed_writes'];
// A round starts early once this many events wait (as the Python SDK's FLUSH_SOON_EVENTS).
const FLUSH_SOON_EVENTS = 2048;
const KNOWN_GAMES_LIMIT = 10000;
// Events one write of a round takes at most; the round goes on with the rest.
const ROUND_EVENTS = 16384;
const LOG_EVERY_MS = 60000;

// The 13-digit collect time of the current millisecond, formatted once per millisecond.
let prefixMs = 0;
let prefixText = '';
function timePrefix() {
  const ms = Date.now();
  if (ms !== prefixMs) {
    prefixMs = ms;
    prefixText = String(ms).padStart(13, '0');
  }
  return prefixText;
}

// Whether JSON.stringify's output holds a lone surrogate: it writes those as \udXXX escapes
// (and a pair as the character itself), so any such escape outside an escaped backslash is
// one. Not UTF-8 text: the reporter would refuse the event.
function holdsLoneSurrogate(json) {
  for (let i = json.indexOf('\\u'); i >= 0; i = json.indexOf('\\u', i + 2)) {
    let slashes = 0;
    for (let j = i - 1; j >= 0 && json.charCodeAt(j) === 92; j -= 1) slashes += 1;
    if (slashes % 2 === 0 && /^[dD][89a-fA-F]/.test(json.slice(i + 2, i + 4))) return true;
  }
  return false;
}

class Collector {
  // `options`: {redis: {...}, buffer: {...}, collector: {...}, games: {name: {...}}}, keys as in
  // the TOML file (docs/configuration.md), over TELEMETRY_<SECTION>_<KEY> variables of `env`.
  // `log(level, message)`: where warnings go (default: standard error, each kind at most once
  // a minute).
  constructor(options = {}, { env = process.env, log = null } = {}) {
    const { log: _unused, ...settings } = options;
    this.config = loadConfig(settings, env);
    const { redis, buffer, collector } = this.config;
    this.schema = new KeySchema(redis.key_prefix, redis.shards);
    this.buffer = new EventBuffer(collector.max_buffer_events, collector.max_buffer_bytes);
    this.counts = Object.fromEntries(COUNTERS.map((name) => [name, 0]));
    this.maxEventBytes = buffer.max_event_bytes;
    this.disabled = collector.disabled;
    this.interval = collector.flush_interval_ms;
    this.longest = collector.retry_max_delay_ms;
    this.delay = this.interval;
    this.knownGames = new Set();
    this.closed = false; // no collect() taken after close()
    this.stopped = false; // no round planned after close() is done
    this.timer = null;
    this.soon = false; // whether the timer is the early one (FLUSH_SOON_EVENTS waiting)
    this.round = null; // the round in progress (a promise)
    this.inFlush = 0; // events the round in progress took
    this.flushedSeq = 0; // the buffer's seq when a round last found nothing to write
    this.writer = null;
    this.redis = null;
    this.logged = new Map();
    this.logTo = log || ((level, message) => process.stderr.write(`telemetry ${level}: ${message}\n`));
    live.add(this);
  }

  // -- the hot path ---------------------------------------------------------------------------

  // Record one event of `game`: a TypeError for a game name that is not valid or an event
  // that is not a JSON object (nothing taken); an event over [buffer] max_event_bytes is
  // dropped and counted (dropped_too_large). Never touches the network, never awaits.
  collect(game, event) {
    if (!this.knownGames.has(game)) this.admit(game);
    if (typeof event !== 'object' || event === null || Array.isArray(event)) {
      throw new TypeError(`event for game ${JSON.stringify(game)} must be an object, got `
        + `${event === null ? 'null' : Array.isArray(event) ? 'an array' : typeof event}`);
    }
    let json;
    try {
      json = JSON.stringify(event);
    } catch (exc) {
      throw new TypeError(`event for game ${JSON.stringify(game)} is not JSON-serialisable: ${exc.message}`);
    }
    if (typeof json !== 'string' || json.charCodeAt(0) !== 123) { // a toJSON() that is no object
      throw new TypeError(`event for game ${JSON.stringify(game)} does not serialise to a JSON object`);
    }
    if (holdsLoneSurrogate(json)) {
      throw new TypeError(`event for game ${JSON.stringify(game)} holds a lone UTF-16 surrogate: not UTF-8 text`);
    }
    const size = json.length <= this.maxEventBytes / 3 ? json.length : Buffer.byteLength(json, 'utf8');
    if (size > this.maxEventBytes) {
      this.dropTooLarge(game, size);
      return;
    }
    if (this.closed) {
      this.counts.dropped_closed += 1;
      this.log('warn', 'closed', `collect() after close(): an event of game ${JSON.stringify(game)} dropped`);
      return;
    }
    if (this.disabled) {
      this.counts.accepted += 1;
      this.counts.dropped_disabled += 1;
      return;
    }
    const waiting = this.buffer.append(game, timePrefix() + json, size + 13);
    if (this.round !== null) return; // the round under way plans the next one
    if (waiting >= FLUSH_SOON_EVENTS) {
      if (!this.soon) this.schedule(0); // once: a timer per call would cost more than the call
    } else if (this.timer === null) {
      this.schedule(this.delay);
    }
  }

  admit(game) {
    checkGame(game);
    if (this.knownGames.size < KNOWN_GAMES_LIMIT) this.knownGames.add(game);
  }

  dropTooLarge(game, size) {
    this.counts.dropped_too_large += 1;
    this.log('warn', `large:${game}`, `event of game ${JSON.stringify(game)} dropped: ${size} bytes `
      + `of JSON, over [buffer] max_event_bytes = ${this.maxEventBytes}`);
    if (this.disabled || this.closed) return;
    this.buffer.note('dropped_too_large', game);
    if (this.timer === null && this.round === null) this.schedule(this.delay);
  }

  // -- counters -------------------------------------------------------------------------------

  // This producer's counters, by the Python SDK's names. At a quiet moment accepted == stored
  // + dropped_buffer_full + dropped_at_close + dropped_disabled + buffered.
  stats() {
    const writer = this.writer;
    const unconfirmedEvents = writer ? writer.unconfirmedEvents : 0;
    return {
      ...this.counts,
      accepted: this.counts.accepted + this.buffer.appended,
      dropped_buffer_full: this.buffer.dropped,
      buffered: this.buffer.length + this.inFlush + unconfirmedEvents,
      unconfirmed_writes: writer ? writer.unconfirmedWrites : 0,
    };
  }

  // -- the writer -----------------------------------------------------------------------------

  getWriter() {
    if (this.writer === null) {
      const r = this.config.redis;
      this.redis = new Redis(r.url, {
        lazyConnect: true,
        connectTimeout: Math.round(r.connect_timeout_seconds * 1000),
        commandTimeout: Math.round(r.socket_timeout_seconds * 1000),
        // A call whose connection broke fails at once, and the writer decides (it resends the
        // same write itself); reconnecting goes on in the background.
        maxRetriesPerRequest: 0,
        autoResendUnfulfilledCommands: false,
        retryStrategy: (times) => Math.min(this.interval * 2 ** Math.min(times, 16), this.longest),
      });
      this.redis.on('error', (exc) => this.log('warn', 'redis', `Redis: ${exc.message}`));
      // The connection alone never keeps the process alive: when nothing else is left, the
      // beforeExit hook below closes the collector (writing what is buffered) instead.
      this.redis.on('connect', () => {
        if (this.redis.stream && this.redis.stream.unref) this.redis.stream.unref();
      });
      this.writer = new Writer({
        redis: this.redis,
        schema: this.schema,
        capFor: (game) => this.setting(game, 'max_events_per_game'),
        ttlFor: (game) => this.setting(game, 'ttl_seconds'),
        counts: this.counts,
        log: (level, key, message) => this.log(level, key, message),
      });
    }
    return this.writer;
  }

  setting(game, key) {
    const own = this.config.games.get(game);
    return (own && own[key]) || this.config.buffer[key];
  }

  schedule(delay) {
    if (this.timer !== null) clearTimeout(this.timer);
    this.soon = delay === 0;
    this.timer = setTimeout(() => {
      this.timer = null;
      this.soon = false;
      this.startRound();
    }, delay);
    this.timer.unref(); // a process is kept alive by its own work, not by telemetry
  }

  startRound() {
    if (this.round === null) {
      this.round = this.runRound().finally(() => {
        this.round = null; // before the waiters look
        for (const wake of this.waiting.splice(0)) wake();
      });
    }
    return this.round;
  }

  // Write until the buffer is empty or Redis fails; then plan the next round.
  async runRound() {
    let ok = true;
    for (;;) {
      const seq = this.buffer.seq;
      const writer = this.getWriter();
      if (!this.buffer.length && !this.buffer.pendingCount && !writer.unconfirmedWrites) {
        this.flushedSeq = seq;
        break;
      }
      // A round's writes in slices, so that no stretch of work between two awaits grows
      // with the buffer (the event loop is never held for long).
      const { queues, pending } = this.buffer.take(ROUND_EVENTS);
      for (const q of queues.values()) this.inFlush += q.entries.length;
      let result;
      try {
        result = await writer.write(queues, pending);
      } catch (exc) { // a bug: never let it stop the writing
        this.buffer.putBack(queues, pending);
        result = { failed: new Map(), failedPending: null, error: exc };
      }
      this.inFlush = 0;
      this.counts.flushes += 1;
      if (result.failed.size || result.failedPending) this.buffer.putBack(result.failed, result.failedPending);
      if (result.error) {
        ok = false;
        this.counts.backend_errors += 1;
        this.log('warn', 'backend', `cannot store events (${result.error.message}); `
          + `${this.buffer.length} buffered, retrying with backoff`);
        break;
      }
      if (writer.unconfirmedWrites) { // answered, yet still unconfirmed: never spin
        ok = false;
        break;
      }
    }
    this.delay = ok ? this.interval : Math.min(Math.max(this.delay * 2, this.interval), this.longest);
    if (!this.stopped && (this.buffer.length || this.buffer.pendingCount || this.writer.unconfirmedWrites)) {
      this.schedule(this.delay);
    }
  }

  get waiting() {
    if (!this.waiters) this.waiters = [];
    return this.waiters;
  }

  // Wait until everything collected so far is in Redis (true), or `timeoutMs` passed (false).
  async flush(timeoutMs = 5000) {
    if (this.disabled) return true;
    const target = this.buffer.seq;
    const deadline = Date.now() + timeoutMs;
    if (this.round === null && this.timer !== null) { // a flush does not wait out a back-off
      clearTimeout(this.timer);
      this.timer = null;
    }
    while (this.flushedSeq < target || this.round !== null) {
      const left = deadline - Date.now();
      if (left <= 0) return false;
      // Rounds follow each other (with their back-off) while there is work; one is started
      // here only when none is under way or planned.
      if (this.round === null && this.timer === null) this.startRound();
      await this.roundOrTimeout(left);
    }
    return true;
  }

  // The end of the next round, or `ms` passing, whichever comes first.
  roundOrTimeout(ms) {
    return new Promise((resolve) => {
      const timer = setTimeout(resolve, ms);
      this.waiting.push(() => {
        clearTimeout(timer);
        resolve();
      });
    });
  }

  // Write what is buffered (for up to `timeoutMs`, by default [collector]
  // close_timeout_seconds), count what is left in dropped_at_close, and stop. Later collect()
  // calls are counted in dropped_closed.
  async close(timeoutMs = this.config.collector.close_timeout_seconds * 1000) {
    if (this.closed) return;
    this.closed = true;
    live.delete(this);
    if (this.timer !== null) clearTimeout(this.timer);
    this.timer = null;
    if (!this.disabled && (this.buffer.length || this.buffer.pendingCount || this.writer)) {
      await this.flush(timeoutMs);
    }
    this.stopped = true;
    if (this.timer !== null) clearTimeout(this.timer);
    this.timer = null;
    if (this.redis !== null) this.redis.disconnect(); // a round still under way fails now
    if (this.round !== null) await this.round;
    let left = this.writer ? this.writer.takeUnconfirmed() : 0;
    for (const n of this.buffer.drain().values()) left += n;
    if (left) {
      this.counts.dropped_at_close += left;
      this.logTo('warn', `collector closed with ${left} events not stored`);
    }
  }

  log(level, key, message) {
    const now = Date.now();
    if (now - (this.logged.get(key) || -Infinity) < LOG_EVERY_MS) return;
    this.logged.set(key, now);
    this.logTo(level, message);
  }
}

// Collectors not closed yet: written out once more when the event loop runs dry.
const live = new Set();
process.on('beforeExit', () => {
  for (const collector of live) collector.close();
});

module.exports = { Collector, COUNTERS, LEVELS, holdsLoneSurrogate };
