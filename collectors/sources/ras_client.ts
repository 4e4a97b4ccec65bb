/**
 * The client side of NCCL's RAS protocol (what the `ncclras` binary speaks; NVIDIA/nccl
 * src/ras/client.cc and client_support.cc), in Node. Plain text lines over TCP:
 *
 *   → CLIENT PROTOCOL 2          ← SERVER PROTOCOL 2   (a newer server still answers; we go on)
 *   → TIMEOUT 5                  ← OK                  (how long RAS waits for other processes)
 *   → SET FORMAT json            ← OK                  (NCCL ≥ 2.28.7; older: "ERROR: Unknown command …")
 *   → STATUS | VERBOSE STATUS    ← the report, then the server closes the connection
 *
 * One query per connection, as `ncclras` does. Output is bounded (`maxBytes`); every step has a
 * deadline, so a process that accepted but stalled cannot hold the poller.
 */
import { Socket } from 'node:net';

export const RAS_PROTOCOL = 2;

export interface RasQuery {
  host: string;
  port: number;
  /** Seconds RAS may wait for other processes' data (its own default is 5). */
  timeoutS: number;
  format: 'text' | 'json';
  verbose: boolean;
  maxBytes: number;
}

export interface RasAnswer {
  text: string;
  /** What the server said it speaks ("SERVER PROTOCOL n"). */
  serverProtocol: number;
  /** JSON was asked for and the server does not know it (NCCL < 2.28.7): the text is text. */
  jsonRefused: boolean;
}

export class RasQueryError extends Error {
  constructor(
    message: string,
    readonly code?: string,
  ) {
    super(message);
    this.name = 'RasQueryError';
  }
}

/** Asks one RAS server for its status. Rejects with a RasQueryError saying which step failed. */
export function queryRas(q: RasQuery): Promise<RasAnswer> {
  return new Promise((resolve, reject) => {
    const sock = new Socket();
    const chunks: Buffer[] = [];
    let size = 0;
    let pending = '';
    let waiting: ((line: string) => void) | undefined;
    let step = 'connecting';
    let inReport = false;
    let done = false;
    // RAS waits timeoutS for its peers, then formats; ncclras allows the same plus 5 s, plus 1.
    const deadline = setTimeout(
      () => fail(`no answer within ${q.timeoutS + 6} s while ${step}`, 'ETIMEDOUT'),
      (q.timeoutS + 6) * 1000,
    );
    const finish = (err?: RasQueryError, answer?: RasAnswer) => {
      if (done) return;
      done = true;
      clearTimeout(deadline);
      sock.destroy();
      if (err) reject(err);
      else resolve(answer!);
    };
    const fail = (msg: string, code?: string) =>
      finish(new RasQueryError(`RAS at ${q.host}:${q.port}: ${msg}`, code));
    /** The next reply line (the handshake's replies are one line each). */
    const line = () =>
      new Promise<string>((res) => {
        const nl = pending.indexOf('\n');
        if (nl >= 0) {
          const l = pending.slice(0, nl);
          pending = pending.slice(nl + 1);
          res(l.replace(/\r$/, ''));
        } else waiting = res;
      });
    sock.on('data', (d: Buffer) => {
      if (inReport) {
        size += d.length;
        if (size > q.maxBytes) return fail(`report larger than ${q.maxBytes} bytes`, 'E2BIG');
        chunks.push(d);
        return;
      }
      pending += d.toString('utf8');
      if (pending.length > 64 * 1024) return fail(`a reply line longer than 64 KiB while ${step}`, 'EPROTO');
      const nl = pending.indexOf('\n');
      if (waiting && nl >= 0) {
        const w = waiting;
        waiting = undefined;
        const l = pending.slice(0, nl);
        pending = pending.slice(nl + 1);
        w(l.replace(/\r$/, ''));
      }
    });
    sock.on('error', (err: NodeJS.ErrnoException) =>
      fail(`${err.code ?? err.message} while ${step}`, err.code),
    );
    sock.on('close', () => {
      if (inReport) {
        const text = Buffer.concat(chunks).toString('utf8');
        if (text.length === 0) return fail('closed without a report', 'ECONNRESET');
        return finish(undefined, { text, serverProtocol, jsonRefused });
      }
      fail(`closed the connection while ${step}`, 'ECONNRESET');
    });
    let serverProtocol = 0;
    let jsonRefused = false;
    sock.connect(q.port, q.host, async () => {
      try {
        step = 'exchanging protocol versions';
        sock.write(`CLIENT PROTOCOL ${RAS_PROTOCOL}\n`);
        const hello = await line();
        const m = /^SERVER PROTOCOL (\d+)/i.exec(hello);
        if (!m)
          return fail(
            `answered "${hello.slice(0, 80)}" instead of SERVER PROTOCOL: not a RAS port?`,
            'EPROTO',
          );
        serverProtocol = Number(m[1]);
        step = 'setting the timeout';
        sock.write(`TIMEOUT ${q.timeoutS}\n`);
        const ok = await line();
        if (ok !== 'OK') return fail(`refused TIMEOUT: "${ok.slice(0, 80)}"`, 'EPROTO');
        if (q.format === 'json') {
          step = 'asking for JSON';
          sock.write('SET FORMAT json\n');
          const f = await line();
          if (f !== 'OK') {
            if (!/^ERROR/.test(f)) return fail(`answered "${f.slice(0, 80)}" to SET FORMAT`, 'EPROTO');
            jsonRefused = true;
          }
        }
        step = 'reading the status report';
        inReport = true;
        if (pending) {
          const b = Buffer.from(pending, 'utf8');
          pending = '';
          size += b.length;
          chunks.push(b);
        }
        sock.write(`${q.verbose ? 'VERBOSE ' : ''}STATUS\n`);
      } catch (err) {
        fail((err as Error).message);
      }
    });
  });
}
