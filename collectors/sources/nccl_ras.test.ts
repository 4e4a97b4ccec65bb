import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createServer, type Server, type Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, afterEach, describe, expect, it } from 'vitest';
import { validateEvent } from '../../schema/validate.js';
import { RankMap } from '../ranks.js';
import { ncclRas, RAS_DEFAULT_ADDRESS } from './nccl_ras.js';
import { recordingDeps, until } from './recording-deps.js';

const fixture = (name: string) =>
  readFileSync(join(import.meta.dirname, '..', 'parsers', 'fixtures', 'nccl-ras', name), 'utf8');
const dir = mkdtempSync(join(tmpdir(), 'rankwatch-ras-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

/**
 * The server side of the RAS client protocol as NCCL implements it (src/ras/client_support.cc,
 * rasClientEventLoop): newline-terminated, case-insensitive commands, one reply line each, and
 * the status report streamed in pieces, after which the server closes the connection.
 */
class RasServer {
  readonly commands: string[] = [];
  private server?: Server;
  constructor(
    private readonly report: { text: string; json?: string },
    /** NCCL before 2.28.7 knows no SET FORMAT. */
    private readonly knowsJson = true,
  ) {}

  async listen(): Promise<number> {
    this.server = createServer((sock) => this.serve(sock));
    await new Promise<void>((r) => this.server!.listen(0, '127.0.0.1', r));
    return (this.server.address() as { port: number }).port;
  }

  close(): Promise<void> {
    return new Promise((r) => (this.server ? this.server.close(() => r()) : r()));
  }

  private serve(sock: Socket): void {
    let buf = '';
    let json = false;
    sock.on('error', () => {});
    sock.on('data', (d) => {
      buf += d.toString();
      for (let nl = buf.indexOf('\n'); nl >= 0; nl = buf.indexOf('\n')) {
        const cmd = buf.slice(0, nl).replace(/\r$/, '');
        buf = buf.slice(nl + 1);
        this.commands.push(cmd);
        const lc = cmd.toLowerCase();
        if (lc.startsWith('client protocol ')) sock.write('SERVER PROTOCOL 2\n');
        else if (lc.startsWith('timeout ')) {
          const t = cmd.slice(8);
          sock.write(/^\d+$/.test(t) ? 'OK\n' : `ERROR: Invalid timeout value ${t}\n`);
        } else if (lc.startsWith('set format ') && this.knowsJson) {
          const f = lc.slice(11);
          json = f === 'json';
          sock.write(f === 'json' || f === 'text' ? 'OK\n' : `ERROR: Invalid format ${f}\n`);
        } else if (lc === 'status' || lc === 'verbose status') {
          const out = json && this.report.json ? this.report.json : this.report.text;
          // The report leaves in several messages (RAS sends the header, the table, errors, warnings).
          const cut = Math.floor(out.length / 3);
          sock.write(out.slice(0, cut));
          setTimeout(() => {
            sock.write(out.slice(cut));
            sock.end();
          }, 20);
        } else sock.write(`ERROR: Unknown command ${cmd}\n`);
      }
    });
  }
}

const deps = () => recordingDeps();

const servers: RasServer[] = [];
afterEach(async () => {
  await Promise.all(servers.splice(0).map((s) => s.close()));
});
async function serve(report: { text: string; json?: string }, knowsJson = true) {
  const s = new RasServer(report, knowsJson);
  servers.push(s);
  return { server: s, port: await s.listen() };
}
const base = {
  type: 'nccl_ras' as const,
  address: RAS_DEFAULT_ADDRESS,
  format: 'json' as const,
  verbose: false,
  intervalMs: 1000,
  timeoutS: 5,
  maxBytes: 64 << 20,
  hosts: {},
};

describe('nccl_ras polling a RAS port (a real TCP server speaking NCCL’s protocol)', () => {
  it('JSON: errors at once; a rank behind only once its count has not moved between two polls', async () => {
    const { server, port } = await serve({
      text: fixture('issue1730-2.26-ok-256.txt'),
      json: fixture('derived-json-behind-async-error.out'),
    });
    const { d, events, problems, errors } = deps();
    const s = ncclRas.create(
      { ...base, address: `127.0.0.1:${port}`, job: 'llm', hosts: { '172.16.64.245': 'gpu-node-3' } },
      d,
    );
    s.start();
    await until(() => events.length >= 1);
    expect(events.map((e) => e.ras)).toEqual(['comm_error']);
    await until(() => events.length >= 2);
    await s.stop();
    expect(errors).toEqual([]);
    expect(problems).toEqual([]);
    expect(server.commands.slice(0, 4)).toEqual([
      'CLIENT PROTOCOL 2',
      'TIMEOUT 5',
      'SET FORMAT json',
      'STATUS',
    ]);
    const behind = events.find((e) => e.ras === 'behind')!;
    expect(behind).toMatchObject({
      kind: 'fault',
      source: 'nccl_ras',
      host: 'gpu-node-3',
      node_addr: '172.16.64.245',
      job: 'llm',
      gpu: 2,
      pid: 1524346,
      comm: 'ae94423cfbb2ef4a',
      comm_rank: 2,
      nranks: 4,
      op: 'allreduce',
      op_raw: 'AllReduce',
      ops: 640,
      peers_ops: 641,
    });
    expect(behind.rank).toBeUndefined();
    expect(events[0]).toMatchObject({
      ras: 'comm_error',
      comm_rank: 3,
      code: 'async_error 6 (ncclRemoteError)',
    });
    for (const e of events) expect(validateEvent(e)).toMatchObject({ ok: true });
  });

  it('an NCCL without JSON (before 2.28.7): falls back to text and stays there', async () => {
    const { server, port } = await serve({ text: fixture('issue1911-2.26-allgather-mismatch.txt') }, false);
    const { d, events, errors, logs } = deps();
    const s = ncclRas.create({ ...base, address: `127.0.0.1:${port}` }, d);
    s.start();
    await until(() => events.length >= 2);
    await s.stop();
    expect(errors).toEqual([]);
    expect(logs.some((l) => /no JSON output/.test(l))).toBe(true);
    // Only the first connection asked for JSON.
    expect(server.commands.filter((c) => c === 'SET FORMAT json')).toHaveLength(1);
    expect(events.map((e) => [e.ras, e.comm_rank, e.ops, e.peers_ops, e.host, e.gpu])).toEqual([
      ['ahead', 12, 641, 640, '10.137.190.124', 4],
      ['ahead', 13, 641, 640, '10.137.190.124', 5],
    ]);
  });

  it('RAS "OK" sends nothing', async () => {
    const { server, port } = await serve({ text: fixture('issue1730-2.26-ok-256.txt') }, false);
    const { d, events, errors } = deps();
    const s = ncclRas.create({ ...base, address: `127.0.0.1:${port}` }, d);
    s.start();
    await until(() => server.commands.filter((c) => c === 'STATUS').length >= 2);
    await s.stop();
    expect(errors).toEqual([]);
    expect(events).toEqual([]);
  });

  it('a closed port and a port that is not RAS are source errors that say so', async () => {
    const closed = createServer();
    await new Promise<void>((r) => closed.listen(0, '127.0.0.1', r));
    const port = (closed.address() as { port: number }).port;
    await new Promise<void>((r) => closed.close(() => r()));
    const a = deps();
    const s1 = ncclRas.create({ ...base, address: `127.0.0.1:${port}` }, a.d);
    s1.start();
    await until(() => a.errors.length >= 1);
    await s1.stop();
    expect(a.errors[0]).toMatch(new RegExp(`RAS at 127.0.0.1:${port}: ECONNREFUSED while connecting`));

    const http = createServer((sock) => {
      sock.on('error', () => {});
      sock.resume();
      sock.end('HTTP/1.1 400 Bad Request\r\n\r\n');
    });
    await new Promise<void>((r) => http.listen(0, '127.0.0.1', r));
    const b = deps();
    const s2 = ncclRas.create(
      { ...base, address: `127.0.0.1:${(http.address() as { port: number }).port}` },
      b.d,
    );
    s2.start();
    await until(() => b.errors.length >= 1);
    await s2.stop();
    await new Promise<void>((r) => http.close(() => r()));
    expect(b.errors[0]).toMatch(
      /answered "HTTP\/1.1 400 Bad Request" instead of SERVER PROTOCOL: not a RAS port\?/,
    );
  });
});

describe('nccl_ras reading a saved output', () => {
  it('a stopped process: unresponsive (process) and its communicator’s missing rank, on this node', async () => {
    const p = join(dir, 'incomplete.txt');
    writeFileSync(p, fixture('docs-2.24-incomplete.txt'));
    const { d, events, problems } = deps();
    const s = ncclRas.create({ ...base, path: p, hosts: { '172.16.64.213': 'node-213' } }, d);
    s.start();
    await until(() => events.length >= 2);
    await s.stop();
    expect(problems).toEqual([]);
    expect(events.map((e) => [e.ras, e.host, e.gpu, e.pid, e.comm, e.comm_rank, e.nranks])).toEqual([
      ['unresponsive', 'node-213', 5, 3487984, undefined, undefined, undefined],
      ['missing', 'this-node', undefined, undefined, 'cf264af53edbe986', 21, 32],
    ]);
    expect(events[1]).toMatchObject({ host_source: 'collector' });
  });

  it('a process RAS names by its pid gets its job and global rank from the rank map; one it cannot map, none', async () => {
    const p = join(dir, 'incomplete-mapped.txt');
    writeFileSync(p, fixture('docs-2.24-incomplete.txt'));
    const { d, events } = deps();
    // The node's hooks sent their step events through this collector, pids included.
    d.ranks = new RankMap({ localHosts: ['this-node'], readEnviron: () => '' });
    const step = { v: 1, kind: 'step', ts: 1, job: 'llm', step: 3, step_ms: 900 };
    d.ranks.learn([{ ...step, rank: 45, host: 'node-213', gpu: 5, pid: 3487984 }]);
    const s = ncclRas.create({ ...base, path: p, hosts: { '172.16.64.213': 'node-213' } }, d);
    s.start();
    await until(() => events.length >= 2);
    await s.stop();
    expect(events.map((e) => [e.ras, e.host, e.gpu, e.pid, e.job, e.rank])).toEqual([
      ['unresponsive', 'node-213', 5, 3487984, 'llm', 45],
      ['missing', 'this-node', undefined, undefined, undefined, undefined],
    ]);
    for (const e of events) expect(validateEvent(e).ok).toBe(true);
    // Another job's process (the source is set to one job) is not given that job's rank.
    const other = deps();
    other.d.ranks = d.ranks;
    const s2 = ncclRas.create(
      { ...base, path: p, job: 'eval', hosts: { '172.16.64.213': 'node-213' } },
      other.d,
    );
    s2.start();
    await until(() => other.events.length >= 2);
    await s2.stop();
    expect(other.events[0]).toMatchObject({ ras: 'unresponsive', job: 'eval', pid: 3487984 });
    expect(other.events[0].rank).toBeUndefined();
  });

  it('every operation-count difference of one snapshot is sent; a rewritten file is read again', async () => {
    const p = join(dir, 'mismatch.txt');
    writeFileSync(p, fixture('damaged-crlf-issue1911.txt'));
    const { d, events } = deps();
    const s = ncclRas.create({ ...base, path: p }, d);
    s.start();
    await until(() => events.length >= 2);
    writeFileSync(p, fixture('docs-2.24-dead.txt'));
    await until(() => events.length >= 4);
    await s.stop();
    expect(events.map((e) => e.ras)).toEqual(['ahead', 'ahead', 'dead', 'missing']);
  });

  it('a cut JSON file is a parse problem, not an event', async () => {
    const p = join(dir, 'cut.json');
    writeFileSync(p, fixture('damaged-cut-docs-json.out'));
    const { d, events, problems } = deps();
    const s = ncclRas.create({ ...base, path: p }, d);
    s.start();
    await until(() => problems.length >= 1);
    await s.stop();
    expect(events).toEqual([]);
    expect(problems[0].reason).toMatch(/^RAS JSON cut or garbled/);
  });
});
