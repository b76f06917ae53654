'use strict';
// The writer: a round of buffered events as collect script calls, and what each reply means
// (docs/protocol.md, "The collect call", "Replies, and what to do", "Written once").
//
// Every call carries this writer's id and a sequence number counted per shard. A call whose
// outcome is unknown (no reply: a timeout, a closed connection) is kept as it is and sent
// again, first and alone for its shard, in later rounds, until it is answered (the shard
// answers a repeat without storing it) or refused by the script; the shard's new calls wait
// meanwhile. A WRITECONFLICT refusal makes the writer take a new id.

const crypto = require('node:crypto');
const { ReplyError } = require('ioredis');
const { crc32 } = require('./keys');
const { PROTOCOL_VERSION, TEXT, SHA } = require('./script');
const { add, noPending } = require('./buffer');

// Bounds of one call (protocol: at most 1,000 entries and 512 KiB of them).
const EVENTS_PER_CALL = 1000;
const CALL_BYTES = 512 * 1024;
// What a shard remembers of a writer (ARGV[12] to [14], [16]); the writer never has more than
// WRITES_PER_WRITER writes without an answer in one shard.
const WRITES_REMEMBERED_MS = 600000;
const WRITERS_PER_SHARD = 10000;
const WRITES_PER_WRITER = 1024;
const DEDUP_KEYS_PER_GAME = 1000000;

function newWriterId() {
  return crypto.randomBytes(8).toString('hex');
}

// One collect call: events of one game (the oldest left out for the cap in `thinned`), the
// counts riding on it, and once sent its writer id, sequence number and content.
class Call {
  constructor(game, shard, entries, sizes, thinned = [], counts = {}) {
    this.game = game;
    this.shard = shard;
    this.entries = entries;
    this.sizes = sizes;
    this.thinned = thinned; // [entries, sizes] of events the cap would evict at once
    this.droppedFull = counts.dropped_buffer_full || 0;
    this.droppedLarge = counts.dropped_too_large || 0;
    this.writer = '';
    this.seq = 0;
    this.maybeRan = false; // a copy may have run (its reply was lost): only an answer ends it
    this.blob = null; // the entries joined, fixed at the first send (a resend is the same)
    this.checksum = '';
  }

  get preEvicted() {
    return this.thinned.length ? this.thinned[0].length : 0;
  }

  get events() {
    return this.entries.length + this.preEvicted;
  }

  // ARGV[4] to [7] and [17]: fixed once, so that every copy of the call is the same write.
  content() {
    if (this.blob === null) {
      this.blob = Buffer.from(this.entries.join('\n'), 'utf8');
      const head = Buffer.from(`${this.game}\n${this.preEvicted} ${this.droppedFull} ${this.droppedLarge}\n`);
      this.checksum = crc32(this.blob, crc32(head)).toString(16).padStart(8, '0');
    }
    return this.blob;
  }
}

// One call per game (more for a game with over EVENTS_PER_CALL events or CALL_BYTES bytes of
// them), the counts riding on the game's first call; more events than the cap are not sent
// (the script counts them as stored and evicted at once: ARGV[4]).
function planCalls(queues, pending, schema, capFor) {
  const games = new Set(queues.keys());
  for (const kind of ['dropped_buffer_full', 'dropped_too_large']) {
    for (const game of pending[kind].keys()) games.add(game);
  }
  const calls = [];
  for (const game of games) {
    const q = queues.get(game) || { entries: [], sizes: [] };
    const cut = Math.max(0, q.entries.length - capFor(game));
    const thinned = cut ? [q.entries.slice(0, cut), q.sizes.slice(0, cut)] : [];
    const shard = schema.shardOf(game);
    const counts = {
      dropped_buffer_full: pending.dropped_buffer_full.get(game) || 0,
      dropped_too_large: pending.dropped_too_large.get(game) || 0,
    };
    const parts = cutParts(q.entries.slice(cut), q.sizes.slice(cut));
    parts.forEach(([entries, sizes], i) => {
      calls.push(new Call(game, shard, entries, sizes, i === 0 ? thinned : [], i === 0 ? counts : {}));
    });
  }
  return calls;
}

// The entries in parts of at most EVENTS_PER_CALL events and CALL_BYTES bytes of UTF-8 (the
// buffer's sizes may count UTF-16 units: the bytes are counted here, off the caller's path).
function cutParts(entries, sizes) {
  if (entries.length <= EVENTS_PER_CALL) {
    let units = 0; // UTF-16 units or bytes: a byte count at most 3 times larger
    for (const size of sizes) units += size;
    if (3 * units <= CALL_BYTES) return [[entries, sizes]]; // the usual case, counted once
  }
  const parts = [[[], []]];
  let bytes = 0;
  for (let i = 0; i < entries.length; i += 1) {
    let [part, partSizes] = parts[parts.length - 1];
    const size = Buffer.byteLength(entries[i], 'utf8');
    if (part.length && (part.length === EVENTS_PER_CALL || bytes + size > CALL_BYTES)) {
      parts.push([[], []]);
      [part, partSizes] = parts[parts.length - 1];
      bytes = 0;
    }
    part.push(entries[i]);
    partSizes.push(sizes[i]);
    bytes += size;
  }
  return parts;
}

// What a reply that is not an answer means for its call.
const UNKNOWN = 'unknown'; // may have run: keep it and send it again as it is
const NOT_STORED = 'not stored'; // refused before it ran (or never sent): its events go back
const REFUSED = 'refused'; // refused for good by the script
const CONFLICT = 'conflict'; // refused: another process uses the writer id

class Writer {
  constructor({ redis, schema, capFor, ttlFor, counts, log }) {
    this.redis = redis;
    this.schema = schema;
    this.capFor = capFor;
    this.ttlFor = ttlFor;
    this.counts = counts; // the collector's counters, added to here
    this.log = log;
    this.writerId = newWriterId();
    this.next = new Map(); // shard -> the id's next sequence number there
    this.unconfirmed = new Map(); // shard -> calls without an answer, by sequence number
    this.markers = new Map(); // shard -> the identity it had at this writer's last write
  }

  get unconfirmedWrites() {
    let n = 0;
    for (const calls of this.unconfirmed.values()) n += calls.length;
    return n;
  }

  get unconfirmedEvents() {
    let n = 0;
    for (const calls of this.unconfirmed.values()) for (const c of calls) n += c.events;
    return n;
  }

  // Give up the calls still without an answer (at close): their events.
  takeUnconfirmed() {
    const n = this.unconfirmedEvents;
    this.unconfirmed = new Map();
    return n;
  }

  // Write one round: the unconfirmed calls, then what was taken from the buffer. Returns what
  // was not stored (to put back in the buffer) and the error of a failed round, if any.
  async write(queues, pending) {
    const fresh = planCalls(queues, pending, this.schema, this.capFor);
    const calls = [];
    for (const shardCalls of this.unconfirmed.values()) calls.push(...shardCalls);
    calls.push(...fresh);
    const replies = new Array(calls.length).fill(null);
    const identity = crypto.randomBytes(16).toString('hex');
    const held = new Set(this.unconfirmed.keys());
    // Shards with unconfirmed calls send those first, alone; their new calls go only once
    // every one of those has an answer.
    const first = this.window(calls, calls.map((c, i) => i).filter((i) => !held.has(calls[i].shard) || calls[i].seq !== 0));
    const error = { value: null };
    await this.send(calls, first, identity, replies, error);
    const later = calls.map((c, i) => i).filter((i) => held.has(calls[i].shard) && calls[i].seq === 0);
    if (later.length) {
      const failed = new Set(first.filter((i) => !Array.isArray(replies[i])).map((i) => calls[i].shard));
      const ready = later.filter((i) => !failed.has(calls[i].shard));
      await this.send(calls, this.window(calls, ready), identity, replies, error);
    }
    return this.settle(calls, replies, error.value);
  }

  // `which`, without the new calls that would put a shard's writes without an answer at
  // WRITES_PER_WRITER or more (they wait for a later round).
  window(calls, which) {
    const room = new Map();
    return which.filter((i) => {
      const c = calls[i];
      if (c.seq !== 0) return true;
      if (!room.has(c.shard)) {
        room.set(c.shard, WRITES_PER_WRITER - ((this.next.get(c.shard) || 1) - this.lowest(c.shard)));
      }
      if (room.get(c.shard) <= 0) return false;
      room.set(c.shard, room.get(c.shard) - 1);
      return true;
    });
  }

  // The shard's lowest sequence number of the current id without an answer (its next if none).
  lowest(shard) {
    let low = this.next.get(shard) || 1;
    for (const c of this.unconfirmed.get(shard) || []) {
      if (c.writer === this.writerId && c.seq < low) low = c.seq;
    }
    return low;
  }

  async send(calls, which, identity, replies, error) {
    if (!which.length) return;
    for (const i of which) { // numbered as they go out, so that each shard's numbers ascend
      const c = calls[i];
      if (c.seq === 0) {
        c.writer = this.writerId;
        c.seq = this.next.get(c.shard) || 1;
        this.next.set(c.shard, c.seq + 1);
      }
    }
    // The lowest number without an answer, per writer and shard: those being sent now and the
    // unconfirmed ones.
    const low = new Map();
    const note = (c) => {
      const key = `${c.writer} ${c.shard}`;
      if (!low.has(key) || c.seq < low.get(key)) low.set(key, c.seq);
    };
    which.forEach((i) => note(calls[i]));
    for (const shardCalls of this.unconfirmed.values()) shardCalls.forEach(note);
    const args = which.map((i) => this.callArgs(calls[i], identity, low.get(`${calls[i].writer} ${calls[i].shard}`)));
    let got = await this.pipeline(args);
    const unloaded = which.map((_, n) => n).filter((n) => isNoScript(got[n]));
    if (unloaded.length) { // NOSCRIPT: the call did not run; load the script, send it again
      try {
        await this.redis.script('LOAD', TEXT);
        const again = await this.pipeline(unloaded.map((n) => args[n]));
        got = got.slice();
        unloaded.forEach((n, k) => { got[n] = again[k]; });
      } catch (exc) {
        unloaded.forEach((n) => { got[n] = exc; });
      }
    }
    which.forEach((i, n) => {
      replies[i] = got[n];
      if (!Array.isArray(got[n]) && !error.value) error.value = got[n];
    });
  }

  callArgs(c, identity, low) {
    const blob = c.content();
    return [
      SHA, 9, ...this.schema.collectKeys(c.game, c.shard),
      c.game, this.capFor(c.game), this.ttlFor(c.game), c.preEvicted, c.droppedFull,
      c.droppedLarge, blob, identity, c.writer, c.seq, low, WRITES_REMEMBERED_MS,
      WRITERS_PER_SHARD, WRITES_PER_WRITER, 0, DEDUP_KEYS_PER_GAME, c.checksum, PROTOCOL_VERSION,
    ];
  }

  // The replies of calls sent in one pipeline: an array (the answer) or an Error each.
  async pipeline(argsList) {
    const pipe = this.redis.pipeline();
    for (const args of argsList) pipe.evalsha(...args);
    let results;
    try {
      results = await pipe.exec();
    } catch (exc) {
      return argsList.map(() => exc);
    }
    return results.map(([err, res]) => (err || (Array.isArray(res) ? res : new Error(`collect: an unexpected reply ${String(res).slice(0, 80)}`))));
  }

  // Count what was stored; keep the calls whose outcome is unknown; return what surely was not
  // stored (refused, or never sent) to go back to the buffer.
  settle(calls, replies, error) {
    const unsure = new Map();
    const failed = new Map();
    const failedPending = noPending();
    for (let i = 0; i < calls.length; i += 1) {
      const c = calls[i];
      const reply = replies[i];
      if (Array.isArray(reply)) {
        this.stored(c, reply);
        continue;
      }
      const outcome = reply === null ? (c.maybeRan ? UNKNOWN : NOT_STORED) : this.outcome(c, reply);
      if (outcome === UNKNOWN) {
        if (!unsure.has(c.shard)) unsure.set(c.shard, []);
        unsure.get(c.shard).push(c);
        continue;
      }
      const q = failed.get(c.game) || { entries: [], sizes: [] };
      if (c.thinned.length) {
        q.entries.push(...c.thinned[0]);
        q.sizes.push(...c.thinned[1]);
      }
      q.entries.push(...c.entries);
      q.sizes.push(...c.sizes);
      failed.set(c.game, q);
      add(failedPending.dropped_buffer_full, c.game, c.droppedFull);
      add(failedPending.dropped_too_large, c.game, c.droppedLarge);
    }
    for (const shardCalls of unsure.values()) shardCalls.sort((a, b) => a.seq - b.seq);
    this.unconfirmed = unsure;
    return { failed, failedPending, error };
  }

  stored(c, reply) {
    const [evicted, marker, merged] = reply;
    this.counts.stored += c.entries.length + c.preEvicted;
    this.counts.evicted += Number(evicted);
    this.counts.merged += Number(merged);
    const known = this.markers.get(c.shard);
    const identity = String(marker);
    if (known !== undefined && known !== identity) {
      this.counts.store_resets += 1;
      this.log('error', 'store-reset', `store reset: shard ${c.shard} lost its data since this `
        + 'process last wrote there (Redis restarted without persistence, was flushed, or failed '
        + 'over to an empty replica); the events buffered there are gone');
    }
    this.markers.set(c.shard, identity);
  }

  // What a reply that is not an answer means for its call (counted here).
  outcome(c, reply) {
    if (!(reply instanceof ReplyError)) { // no reply: it may have run
      c.maybeRan = true;
      return UNKNOWN;
    }
    const text = reply.message;
    if (text.startsWith('WRITECONFLICT ') || text.startsWith('collect: ')) {
      this.counts.refused_writes += 1;
      const conflict = text.startsWith('WRITECONFLICT ');
      this.log('warn', `refused:${conflict}`, `a write of game ${JSON.stringify(c.game)} refused for `
        + `good (${text}); its events go back to the buffer as new writes`);
      if (conflict) {
        this.counts.refused_repeats += 1;
        if (c.writer === this.writerId) {
          this.writerId = newWriterId();
          this.next = new Map();
          this.log('warn', 'new-id', `writer id ${this.writerId} from now on: a shard remembers `
            + 'the old one with other writes (another process uses it)');
        }
        return CONFLICT;
      }
      return REFUSED;
    }
    if (text.startsWith('OOM')) this.counts.refused_oom += c.events;
    // Refused before it ran: says nothing of an earlier copy whose reply was lost.
    return c.maybeRan ? UNKNOWN : NOT_STORED;
  }
}

function isNoScript(reply) {
  return reply instanceof ReplyError && reply.message.startsWith('NOSCRIPT');
}

module.exports = {
  Writer, Call, planCalls, newWriterId, EVENTS_PER_CALL, CALL_BYTES, WRITES_PER_WRITER,
};
