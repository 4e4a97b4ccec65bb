/** Loopback ports for the brokers tests start, so a port some other process holds never fails a run. */
import { createServer } from 'node:net';

function listenOn(port: number): Promise<number | undefined> {
  return new Promise((resolve) => {
    const s = createServer();
    s.once('error', () => resolve(undefined));
    s.listen(port, '127.0.0.1', () => {
      const got = (s.address() as { port: number }).port;
      s.close(() => resolve(got));
    });
  });
}

/**
 * A port whose next port is free too (a KRaft broker takes PORT and PORT+1 for its controller):
 * `preferred` when both are free, else the first such pair the OS hands out.
 */
export async function freePortPair(preferred: number): Promise<number> {
  if ((await listenOn(preferred)) && (await listenOn(preferred + 1))) return preferred;
  for (let i = 0; i < 50; i++) {
    const p = await listenOn(0);
    if (p && p < 65535 && (await listenOn(p + 1))) return p;
  }
  throw new Error(`no two consecutive free ports on 127.0.0.1 (wanted ${preferred})`);
}
