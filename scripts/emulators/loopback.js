// Preload for emulators that bind every interface (fauxqs binds 0.0.0.0):
// `node --require scripts/emulators/loopback.js ...` makes every TCP
// net.Server listen on 127.0.0.1 instead, whatever host it asked for, so a
// test emulator is never reachable from the network. Unix sockets and
// handles are left alone.
'use strict';
const net = require('net');

const host = process.env.EMULATOR_BIND_HOST || '127.0.0.1';
const listen = net.Server.prototype.listen;

function isPort(v) {
  return typeof v === 'number' || (typeof v === 'string' && /^\d+$/.test(v));
}

net.Server.prototype.listen = function (...args) {
  const first = args[0];
  if (first !== null && typeof first === 'object' && !Array.isArray(first)) {
    // listen(options[, cb]): keep path/handle listeners as they are.
    if (first.path === undefined && first.handle === undefined && first._handle === undefined && first.fd === undefined) {
      args[0] = Object.assign({}, first, { host });
    }
  } else if (isPort(first) || first === undefined || typeof first === 'function') {
    // listen([port][, host][, backlog][, cb])
    if (first === undefined || typeof first === 'function') {
      args.unshift(0);
    }
    if (typeof args[1] === 'string' || args[1] === undefined || args[1] === null) {
      args[1] = host;
    } else {
      args.splice(1, 0, host); // listen(port, backlog|cb)
    }
  }
  return listen.apply(this, args);
};
