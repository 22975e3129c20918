// Loaded with NODE_OPTIONS=--require into a Node.js host under test (Letta Code): any connection to a host other than
// loopback is refused before it leaves the machine, and written to $TIERMEM_NET_LOG so the test can fail on it.
"use strict";
const net = require("node:net");
const fs = require("node:fs");

const loopback = (host) => !host || host === "localhost" || host === "::1" || /^127\./.test(host) || host === "::ffff:127.0.0.1";
const connect = net.Socket.prototype.connect;
net.Socket.prototype.connect = function guarded(...args) {
  const first = args[0];
  let host;
  let port;
  if (Array.isArray(first)) return connect.apply(this, args);
  if (first && typeof first === "object") {
    if (first.path) return connect.apply(this, args); // a unix socket
    host = first.host;
    port = first.port;
  } else if (typeof first === "number" || (typeof first === "string" && /^\d+$/.test(first))) {
    port = first;
    host = typeof args[1] === "string" ? args[1] : "localhost";
  } else {
    return connect.apply(this, args); // a unix socket path
  }
  if (loopback(host)) return connect.apply(this, args);
  if (process.env.TIERMEM_NET_LOG) fs.appendFileSync(process.env.TIERMEM_NET_LOG, `${host}:${port}\n`);
  const error = Object.assign(new Error(`offline test: connection to ${host}:${port} refused`), { code: "ECONNREFUSED" });
  process.nextTick(() => this.destroy(error));
  return this;
};
