import { createConnection, createServer, type Server, type Socket } from 'node:net';

/**
 * A TCP proxy on 127.0.0.1:<ephemeral> in front of a real server (PostgreSQL, Redis, an engine),
 * to take the network away from a running gateway in the ways production loses it:
 *
 * - `cut()`: a loud outage. Every connection is destroyed and the port stops listening: new
 *   connections are refused (ECONNREFUSED) at once.
 * - `reset()`: the port listens but resets every connection it accepts (and those it held): a
 *   peer that crashes on each connection. `accepted` still counts the attempts.
 * - `silence()`: the outage that matters most in production, packets dropped: nothing more
 *   crosses in either direction on the connections held, and a new connection is accepted but
 *   never reaches the server, so a client hangs until its own timeouts fire. (A real dropped SYN
 *   would hang the connect itself; here the connect completes and the first reply never comes,
 *   which is what a client waiting on a handshake or a query sees.)
 *
 * `restore()` lets traffic through again: what was held during a silence then flows, as when a
 * partition heals and TCP retransmits.
 */
export interface TcpProxy {
  readonly port: number;
  /** Connections accepted so far (to see that clients reconnected, or tried to). */
  readonly accepted: number;
  cut(): Promise<void>;
  reset(): Promise<void>;
  silence(): Promise<void>;
  restore(): Promise<void>;
  close(): Promise<void>;
}

type Mode = 'pass' | 'cut' | 'reset' | 'silent';

interface Pair {
  client: Socket;
  upstream: Socket | undefined;
}

export async function startTcpProxy(targetPort = 5432, targetHost = '127.0.0.1'): Promise<TcpProxy> {
  const pairs = new Set<Pair>();
  let accepted = 0;
  let mode: Mode = 'pass';

  const destroy = (pair: Pair) => {
    pair.client.destroy();
    pair.upstream?.destroy();
    pairs.delete(pair);
  };
  const connect = (pair: Pair) => {
    const upstream = createConnection({ port: targetPort, host: targetHost });
    pair.upstream = upstream;
    pair.client.pipe(upstream);
    upstream.pipe(pair.client);
    upstream.on('error', () => destroy(pair));
    upstream.on('close', () => destroy(pair));
  };
  const hold = (pair: Pair) => {
    pair.client.pause();
    pair.upstream?.pause();
  };

  const server: Server = createServer((client) => {
    accepted += 1;
    if (mode === 'reset') {
      client.resetAndDestroy();
      return;
    }
    const pair: Pair = { client, upstream: undefined };
    pairs.add(pair);
    client.on('error', () => destroy(pair));
    client.on('close', () => destroy(pair));
    if (mode === 'silent') client.pause();
    else connect(pair);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const address = server.address();
  if (address === null || typeof address === 'string') throw new Error('the proxy has no port');
  const listen = () =>
    new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen(address.port, '127.0.0.1', () => {
        server.off('error', reject);
        resolve();
      });
    });

  return {
    port: address.port,
    get accepted() {
      return accepted;
    },
    async cut() {
      mode = 'cut';
      const closed = new Promise((resolve) => server.close(resolve));
      for (const pair of [...pairs]) destroy(pair);
      await closed;
    },
    async reset() {
      if (!server.listening) await listen();
      mode = 'reset';
      for (const pair of [...pairs]) {
        pair.client.resetAndDestroy();
        destroy(pair);
      }
    },
    async silence() {
      if (!server.listening) await listen();
      mode = 'silent';
      for (const pair of pairs) hold(pair);
    },
    async restore() {
      if (!server.listening) await listen();
      const was = mode;
      mode = 'pass';
      if (was !== 'silent') return;
      for (const pair of pairs) {
        if (pair.upstream === undefined) connect(pair);
        else pair.upstream.resume();
        pair.client.resume();
      }
    },
    async close() {
      for (const pair of [...pairs]) destroy(pair);
      if (server.listening) await new Promise((resolve) => server.close(resolve));
    },
  };
}
