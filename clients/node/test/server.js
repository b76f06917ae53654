'use strict';
// A real Redis-protocol server for the tests, started on a free loopback port: the binary
// named by TELEMETRY_TEST_REDIS_SERVER (the Python tests pass the one they use), else
// redis-server or valkey-server from PATH. None: the tests fail, saying what to install.

const { spawn } = require('node:child_process');
const fs = require('node:fs');
const net = require('node:net');
const os = require('node:os');
const path = require('node:path');
const Redis = require('ioredis');

function findBinary() {
  const named = process.env.TELEMETRY_TEST_REDIS_SERVER;
  if (named) return named;
  for (const name of ['redis-server', 'valkey-server']) {
    for (const dir of (process.env.PATH || '').split(path.delimiter)) {
      const candidate = path.join(dir, name);
      if (dir && fs.existsSync(candidate)) return candidate;
    }
  }
  throw new Error('no Redis-protocol server for the tests: set TELEMETRY_TEST_REDIS_SERVER to a '
    + 'redis-server or valkey-server binary, or put redis-server (Redis 7 or newer) on PATH');
}

function freePort() {
  return new Promise((resolve, reject) => {
    const probe = net.createServer();
    probe.once('error', reject);
    probe.listen(0, '127.0.0.1', () => {
      const { port } = probe.address();
      probe.close(() => resolve(port));
    });
  });
}

class Server {
  constructor() {
    this.binary = findBinary();
    this.dir = fs.mkdtempSync(path.join(os.tmpdir(), 'telemetry-node-test-'));
    this.proc = null;
    this.port = 0;
  }

  get url() {
    return `redis://127.0.0.1:${this.port}/0`;
  }

  async start() {
    if (!this.port) this.port = await freePort();
    this.proc = spawn(this.binary, ['--port', String(this.port), '--bind', '127.0.0.1', '--save', '',
      '--appendonly', 'no', '--dir', this.dir], { stdio: 'ignore' });
    const deadline = Date.now() + 10000;
    while (Date.now() < deadline) {
      const client = this.client();
      try {
        await client.ping();
        return this;
      } catch {
        await new Promise((r) => setTimeout(r, 50));
      } finally {
        client.disconnect();
      }
    }
    throw new Error(`${this.binary} did not answer on port ${this.port}`);
  }

  // A client of the server (it reconnects after a restart); errors are the caller's to see.
  client() {
    const client = new Redis(this.url, { lazyConnect: true, maxRetriesPerRequest: 1 });
    client.on('error', () => {});
    return client;
  }

  async stop() {
    if (!this.proc) return;
    const proc = this.proc;
    this.proc = null;
    const ended = new Promise((r) => proc.once('exit', r));
    proc.kill('SIGKILL');
    await ended;
  }

  async cleanup() {
    await this.stop();
    fs.rmSync(this.dir, { recursive: true, force: true });
  }
}

module.exports = { Server, freePort };
