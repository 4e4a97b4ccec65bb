/** A client that dribbles its request (slowloris), to see a server's timeouts close it. */
import { connect } from 'node:net';

/**
 * Sends `head` to 127.0.0.1:`port` now and then `drip` every 100 ms; resolves with what came back
 * once the server closes the connection (or after 30 s, `closedByServer` false).
 */
export function slowClient(
  port: number,
  head: string,
  drip = 'a',
): Promise<{ got: string; closedByServer: boolean }> {
  return new Promise((resolve) => {
    const socket = connect(port, '127.0.0.1');
    let got = '';
    let timer: NodeJS.Timeout | undefined;
    const giveUp = setTimeout(() => {
      socket.destroy();
      resolve({ got, closedByServer: false });
    }, 30_000);
    socket.on('connect', () => {
      socket.write(head);
      timer = setInterval(() => socket.writable && socket.write(drip), 100);
    });
    socket.on('data', (d) => {
      got += d.toString();
    });
    socket.on('error', () => {});
    socket.on('close', () => {
      clearInterval(timer);
      clearTimeout(giveUp);
      resolve({ got, closedByServer: true });
    });
  });
}
