'use strict';
// A TCP relay to a server that loses the reply to the next EVALSHA on request: the call
// reaches the server and runs, then the client's connection is closed before the reply is
// passed on (a timeout or a dropped connection after the write).

const net = require('node:net');

class ReplyDropper {
  constructor(port) {
    this.target = port;
    this.armed = false;
    this.dropped = 0;
    this.evalshas = [];
    this.sockets = new Set();
    this.server = net.createServer((client) => this.relay(client));
  }

  listen() {
    return new Promise((resolve) => this.server.listen(0, '127.0.0.1', () => {
      this.port = this.server.address().port;
      resolve(this);
    }));
  }

  get url() {
    return `redis://127.0.0.1:${this.port}/0`;
  }

  relay(client) {
    const upstream = net.connect(this.target, '127.0.0.1');
    this.sockets.add(client).add(upstream);
    let losing = false;
    client.on('data', (data) => {
      if (data.includes('EVALSHA') || data.includes('evalsha')) {
        this.evalshas.push(data);
        if (this.armed) {
          this.armed = false;
          losing = true;
        }
      }
      upstream.write(data);
    });
    upstream.on('data', (data) => {
      if (!losing) {
        client.write(data);
        return;
      }
      this.dropped += 1; // the call ran: its reply goes nowhere
      client.destroy();
      upstream.destroy();
    });
    const end = () => {
      client.destroy();
      upstream.destroy();
    };
    client.on('error', end).on('close', end);
    upstream.on('error', end).on('close', end);
  }

  close() {
    for (const s of this.sockets) s.destroy();
    return new Promise((r) => this.server.close(r));
  }
}

module.exports = { ReplyDropper };
