'use strict';
// The bounded in-process buffer between collect() and the writer: at most `maxEvents` events
// and `maxBytes` bytes of entries; past either, the oldest events (of any game) are dropped and
// counted, per game, so that the count reaches the game's shard with its next write.

// Counts per game still to be reported to the game's shard (the collect call's ARGV[4] to [6]).
const PENDING_KINDS = ['evicted', 'dropped_buffer_full', 'dropped_too_large'];

function noPending() {
  return { evicted: new Map(), dropped_buffer_full: new Map(), dropped_too_large: new Map() };
}

function add(map, game, n) {
  if (n) map.set(game, (map.get(game) || 0) + n);
}

class EventBuffer {
  constructor(maxEvents, maxBytes) {
    this.maxEvents = maxEvents;
    this.maxBytes = maxBytes;
    // Waiting events, oldest first, from `head` on: three arrays, so that dropping the oldest
    // is one index step.
    this.games = [];
    this.entries = [];
    this.sizes = [];
    this.head = 0;
    this.bytes = 0;
    this.pending = noPending();
    this.pendingCount = 0; // counts in `pending`, so that "anything to report?" is one test
    this.appended = 0; // events ever taken (collect()'s accepted)
    this.dropped = 0; // events dropped for want of room (dropped_buffer_full)
    this.seq = 0; // bumped by every append and note (flush() waits for a round after it)
  }

  get length() {
    return this.entries.length - this.head;
  }

  // Take one entry of `game` (`size` bytes); drop the oldest while over a bound.
  append(game, entry, size) {
    this.games.push(game);
    this.entries.push(entry);
    this.sizes.push(size);
    this.bytes += size;
    this.appended += 1;
    this.seq += 1;
    if (this.length > this.maxEvents || this.bytes > this.maxBytes) this.dropOldest();
    return this.length;
  }

  note(kind, game, n = 1) {
    add(this.pending[kind], game, n);
    this.pendingCount += n;
    this.seq += 1;
  }

  dropOldest() {
    while (this.length > 0 && (this.length > this.maxEvents || this.bytes > this.maxBytes)) {
      const i = this.head;
      this.bytes -= this.sizes[i];
      this.note('dropped_buffer_full', this.games[i]);
      this.games[i] = this.entries[i] = undefined;
      this.head += 1;
      this.dropped += 1;
    }
    if (this.head > 4096 && this.head * 2 > this.entries.length) this.compact();
  }

  compact() {
    this.games = this.games.slice(this.head);
    this.entries = this.entries.slice(this.head);
    this.sizes = this.sizes.slice(this.head);
    this.head = 0;
  }

  // The oldest `most` events waiting (all by default), grouped by game in order (Map game ->
  // {entries, sizes}), and every count to report; what is left stays, oldest first.
  take(most = Infinity) {
    const queues = new Map();
    const end = Math.min(this.entries.length, this.head + most);
    let bytes = 0;
    for (let i = this.head; i < end; i += 1) {
      const game = this.games[i];
      let q = queues.get(game);
      if (!q) {
        q = { entries: [], sizes: [] };
        queues.set(game, q);
      }
      q.entries.push(this.entries[i]);
      q.sizes.push(this.sizes[i]);
      bytes += this.sizes[i];
    }
    const pending = this.pending;
    if (end < this.entries.length) {
      this.games = this.games.slice(end);
      this.entries = this.entries.slice(end);
      this.sizes = this.sizes.slice(end);
      this.bytes -= bytes;
    } else {
      this.games = [];
      this.entries = [];
      this.sizes = [];
      this.bytes = 0;
    }
    this.head = 0;
    this.pending = noPending();
    this.pendingCount = 0;
    return { queues, pending };
  }

  // Put back what a write did not store, ahead of what came since (each game's in its order),
  // with its counts; then drop the oldest while over a bound.
  putBack(queues, pending) {
    const games = [];
    const entries = [];
    const sizes = [];
    for (const [game, q] of queues) {
      for (let i = 0; i < q.entries.length; i += 1) {
        games.push(game);
        entries.push(q.entries[i]);
        sizes.push(q.sizes[i]);
        this.bytes += q.sizes[i];
      }
    }
    if (entries.length) {
      this.games = games.concat(this.games.slice(this.head));
      this.entries = entries.concat(this.entries.slice(this.head));
      this.sizes = sizes.concat(this.sizes.slice(this.head));
      this.head = 0;
    }
    for (const kind of PENDING_KINDS) {
      for (const [game, n] of pending[kind]) {
        add(this.pending[kind], game, n);
        this.pendingCount += n;
      }
    }
    if (this.length > this.maxEvents || this.bytes > this.maxBytes) this.dropOldest();
  }

  // At close: the events left, per game (counted as dropped_at_close by the caller).
  drain() {
    const { queues } = this.take();
    const left = new Map();
    for (const [game, q] of queues) left.set(game, q.entries.length);
    return left;
  }
}

module.exports = { EventBuffer, noPending, add, PENDING_KINDS };
