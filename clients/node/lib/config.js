'use strict';
// The producer's settings: the Python SDK's sections and keys, with its defaults and ranges
// (docs/configuration.md), from TELEMETRY_<SECTION>_<KEY> environment variables and the
// options given to the Collector (options win). Checked once, here: a bad value, an unknown
// key of a known section, or a setting this producer cannot honour (Redis Cluster, Sentinel,
// WAIT, sync mode, dedup fields, a config file) is a ConfigError naming it.

class ConfigError extends Error {
  constructor(message) {
    super(message);
    this.name = 'ConfigError';
  }
}

const PREFIX = /^[A-Za-z0-9_.:-]{1,64}$/;

// Each key: its default, kind and range; `unsupported(value)` says why a value cannot be
// honoured (undefined when it can).
const SECTIONS = {
  redis: {
    url: { default: 'redis://127.0.0.1:6379/0', kind: 'string', check: checkUrl },
    cluster: { default: false, kind: 'bool', unsupported: (v) => v && 'Redis Cluster' },
    key_prefix: { default: 'telemetry', kind: 'string', check: checkPrefix },
    shards: { default: 16, kind: 'int', lo: 1, hi: 16384, check: checkShards },
    socket_timeout_seconds: { default: 2.0, kind: 'number', lo: 0.01, hi: 300 },
    connect_timeout_seconds: { default: 2.0, kind: 'number', lo: 0.01, hi: 300 },
    retries: { default: 1, kind: 'int', lo: 0, hi: 10 },
    health_check_interval_seconds: { default: 30, kind: 'int', lo: 0, hi: 3600 },
    sentinels: { default: [], kind: 'list', unsupported: (v) => v.length && 'Redis Sentinel' },
    sentinel_service: { default: '', kind: 'string', unsupported: (v) => v && 'Redis Sentinel' },
    sentinel_password: { default: '', kind: 'string', unsupported: (v) => v && 'Redis Sentinel' },
    wait_for_replicas: {
      default: 0, kind: 'int', lo: 0, hi: 16, unsupported: (v) => v > 0 && 'WAIT for replicas',
    },
    wait_timeout_ms: { default: 500, kind: 'int', lo: 1, hi: 60000 },
  },
  buffer: {
    max_events_per_game: { default: 1000, kind: 'int', lo: 1, hi: 10000000 },
    ttl_seconds: { default: 3600, kind: 'int', lo: 1, hi: 30 * 86400 },
    max_event_bytes: { default: 32768, kind: 'int', lo: 64, hi: 512 * 1024 - 16 },
    dedup_fields: { default: [], kind: 'list', unsupported: (v) => v.length && 'dedup keys' },
    dedup_window_seconds: { default: 180, kind: 'int', lo: 1, hi: 86400 },
  },
  collector: {
    mode: {
      default: 'background',
      kind: 'string',
      check: (v) => (['background', 'sync'].includes(v) ? undefined : 'expected "background" or "sync"'),
      unsupported: (v) => v === 'sync' && 'sync mode',
    },
    max_buffer_events: { default: 100000, kind: 'int', lo: 1, hi: 100000000 },
    max_buffer_bytes: { default: 64 * 1024 * 1024, kind: 'int', lo: 64 * 1024, hi: 64 * 1024 ** 3 },
    flush_interval_ms: { default: 50, kind: 'int', lo: 1, hi: 60000 },
    close_timeout_seconds: { default: 5.0, kind: 'number', lo: 0, hi: 600 },
    retry_max_delay_ms: { default: 5000, kind: 'int', lo: 10, hi: 600000 },
    sync_resend_seconds: { default: 5.0, kind: 'number', lo: 0, hi: 600 },
    disabled: { default: false, kind: 'bool' },
  },
};
// Keys of a [games."<name>"] table this producer reads (0: the [buffer] value).
const GAME_KEYS = {
  max_events_per_game: { default: 0, kind: 'int', lo: 0, hi: 10000000 },
  ttl_seconds: { default: 0, kind: 'int', lo: 0, hi: 30 * 86400 },
};

function checkUrl(url) {
  if (!/^(redis|rediss):\/\//.test(url)) return 'expected a redis:// or rediss:// URL';
  try {
    const parsed = new URL(url);
    if (parsed.pathname && !/^\/?\d*$/.test(parsed.pathname)) {
      return 'the database (the path after the host) must be a number';
    }
  } catch {
    return 'not a URL';
  }
  return undefined;
}

function checkPrefix(prefix) {
  return PREFIX.test(prefix) ? undefined : 'expected 1 to 64 characters from [A-Za-z0-9_.:-]';
}

function checkShards(shards) {
  return (shards & (shards - 1)) === 0 ? undefined : 'expected a power of two (1, 2, 4, ... 16384)';
}

// A value from the environment, in TOML syntax for what is not a string.
function fromEnvText(text, spec, where) {
  if (spec.kind === 'string') return text;
  const t = text.trim();
  if (spec.kind === 'bool') {
    if (t === 'true') return true;
    if (t === 'false') return false;
  } else if (spec.kind === 'list') {
    if (/^\[\s*\]$/.test(t)) return [];
    try {
      const list = JSON.parse(t); // TOML arrays of strings read as JSON ones
      if (Array.isArray(list)) return list;
    } catch {
      // reported below
    }
  } else if (/^[+-]?(\d[\d_]*)(\.\d+)?([eE][+-]?\d+)?$/.test(t)) {
    return Number(t.replace(/_/g, ''));
  }
  throw new ConfigError(`${where}: expected ${describe(spec)} (TOML syntax), found ${JSON.stringify(text)}`);
}

function describe(spec) {
  return {
    string: 'a string', bool: 'true or false', list: 'a list', int: 'an integer', number: 'a number',
  }[spec.kind];
}

function checkValue(value, spec, where) {
  const kind = spec.kind;
  const ok = (kind === 'string' && typeof value === 'string')
    || (kind === 'bool' && typeof value === 'boolean')
    || (kind === 'list' && Array.isArray(value))
    || (kind === 'int' && Number.isInteger(value))
    || (kind === 'number' && typeof value === 'number' && Number.isFinite(value));
  if (!ok) throw new ConfigError(`${where}: expected ${describe(spec)}, found ${JSON.stringify(value)}`);
  if (spec.lo !== undefined && (value < spec.lo || value > spec.hi)) {
    throw new ConfigError(`${where}: expected ${spec.lo} to ${spec.hi}, found ${value}`);
  }
  const problem = spec.check && spec.check(value);
  if (problem) throw new ConfigError(`${where}: ${problem}, found ${JSON.stringify(value)}`);
  const unsupported = spec.unsupported && spec.unsupported(value);
  if (unsupported) {
    throw new ConfigError(`${where}: ${unsupported} is not supported by the Node.js producer; `
      + 'use the Python SDK or the HTTP ingest (telemetry-reporter ingest) for it');
  }
  return value;
}

// The variables of the environment that set keys of the producer's sections.
function envOverrides(env) {
  const out = {};
  if (env.TELEMETRY_CONFIG) {
    throw new ConfigError('TELEMETRY_CONFIG is set, and the Node.js producer reads no config '
      + 'file: set TELEMETRY_<SECTION>_<KEY> variables or pass options');
  }
  for (const [variable, text] of Object.entries(env)) {
    if (!variable.startsWith('TELEMETRY_')) continue;
    const rest = variable.slice('TELEMETRY_'.length).toLowerCase();
    const section = Object.keys(SECTIONS).find((name) => rest.startsWith(`${name}_`));
    if (!section) continue; // another reader's (the reporter's sections, other tools)
    const key = rest.slice(section.length + 1);
    if (!(key in SECTIONS[section])) {
      throw new ConfigError(`environment variable ${variable}: unknown key ${JSON.stringify(key)} in `
        + `[${section}]; expected one of ${Object.keys(SECTIONS[section]).join(', ')}`);
    }
    out[section] = out[section] || {};
    out[section][key] = [variable, text];
  }
  return out;
}

// The settings: defaults, then the environment, then `options` ({redis: {...}, buffer: {...},
// collector: {...}, games: {name: {...}}}, keys as in the TOML file).
function loadConfig(options = {}, env = process.env) {
  const overrides = envOverrides(env);
  const config = {};
  for (const name of Object.keys(options)) {
    if (!(name in SECTIONS) && name !== 'games') {
      throw new ConfigError(`options: unknown section ${JSON.stringify(name)}; expected one of `
        + `${[...Object.keys(SECTIONS), 'games'].join(', ')}`);
    }
  }
  for (const [section, keys] of Object.entries(SECTIONS)) {
    const given = options[section] || {};
    for (const key of Object.keys(given)) {
      if (!(key in keys)) {
        throw new ConfigError(`options.${section}: unknown key ${JSON.stringify(key)}; expected one `
          + `of ${Object.keys(keys).join(', ')}`);
      }
    }
    config[section] = {};
    for (const [key, spec] of Object.entries(keys)) {
      let value = spec.default;
      let where = `[${section}] ${key}`;
      const fromEnv = overrides[section] && overrides[section][key];
      if (key in given) {
        value = given[key];
        where = `options.${section}.${key}`;
      } else if (fromEnv) {
        where = `environment variable ${fromEnv[0]}: [${section}] ${key}`;
        value = fromEnvText(fromEnv[1], spec, where);
      }
      config[section][key] = checkValue(value, spec, where);
    }
  }
  config.games = loadGames(options.games || {});
  if (config.collector.max_buffer_bytes < 2 * config.buffer.max_event_bytes) {
    throw new ConfigError('[collector] max_buffer_bytes: expected at least twice [buffer] '
      + `max_event_bytes (${2 * config.buffer.max_event_bytes}) so the largest events fit, found `
      + `${config.collector.max_buffer_bytes}`);
  }
  return Object.freeze(config);
}

function loadGames(games) {
  const out = new Map();
  for (const [game, table] of Object.entries(games)) {
    const settings = {};
    for (const key of Object.keys(table)) {
      if (!(key in GAME_KEYS)) {
        throw new ConfigError(`options.games[${JSON.stringify(game)}]: unknown key ${JSON.stringify(key)}; `
          + `expected one of ${Object.keys(GAME_KEYS).join(', ')}`);
      }
    }
    for (const [key, spec] of Object.entries(GAME_KEYS)) {
      const where = `options.games[${JSON.stringify(game)}].${key}`;
      settings[key] = checkValue(key in table ? table[key] : spec.default, spec, where);
    }
    out.set(game, Object.freeze(settings));
  }
  return out;
}

module.exports = { ConfigError, loadConfig, SECTIONS };
