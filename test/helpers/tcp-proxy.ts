import { createConnection, createServer, type Server, type Socket } from 'node:net';

/**
 * A TCP proxy on 127.0.0.1:<ephemeral> in front of a real server (PostgreSQL), to cut the
 * network under a running gateway: `cut()` destroys every connection and stops listening (new
 * connections are refused, ECONNREFUSED) until `restore()` listens on the same port again.
 */
export interface TcpProxy {
  readonly port: number;
  /** Connections accepted so far (to see that clients reconnected). */
  readonly accepted: number;
  cut(): Promise<void>;
  restore(): Promise<void>;
  close(): Promise<void>;
}

export async function startTcpProxy(targetPort = 5432, targetHost = '127.0.0.1'): Promise<TcpProxy> {
  const sockets = new Set<Socket>();
  let accepted = 0;
  const track = (socket: Socket) => {
    sockets.add(socket);
    socket.once('close', () => sockets.delete(socket));
  };
  const server: Server = createServer((client) => {
    accepted += 1;
    const upstream = createConnection({ port: targetPort, host: targetHost });
    track(client);
    track(upstream);
    client.pipe(upstream);
    upstream.pipe(client);
    client.on('error', () => upstream.destroy());
    upstream.on('error', () => client.destroy());
    client.on('close', () => upstream.destroy());
    upstream.on('close', () => client.destroy());
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const address = server.address();
  if (address === null || typeof address === 'string') throw new Error('the proxy has no port');
  return {
    port: address.port,
    get accepted() {
      return accepted;
    },
    async cut() {
      const closed = new Promise((resolve) => server.close(resolve));
      for (const socket of sockets) socket.destroy();
      await closed;
    },
    async restore() {
      await new Promise<void>((resolve, reject) => {
        server.once('error', reject);
        server.listen(address.port, '127.0.0.1', () => {
          server.off('error', reject);
          resolve();
        });
      });
    },
    async close() {
      for (const socket of sockets) socket.destroy();
      if (server.listening) await new Promise((resolve) => server.close(resolve));
    },
  };
}
