/**
 * Polls NCCL's RAS port (NCCL ≥ 2.24; 127.0.0.1:28028 unless the job set NCCL_RAS_ADDR) for the job
 * status, or reads a saved `ncclras` output file whenever it changes, and sends `fault` events
 * (source `nccl_ras`) for what is abnormal: unresponsive, dead and missing ranks, communicator
 * errors, and ranks whose operation counts differ from their peers'. Nothing is sent for "OK",
 * which is not proof of health (NVIDIA/nccl#1730).
 *
 * Operation counts differ for a moment in any busy job (RAS's own docs); what matters is a count
 * that does not move. So on the port, a rank behind or ahead is sent only when its count is the
 * same as at the previous poll (`mismatch: "stalled"`); a saved file, one snapshot, sends every
 * difference (`"every"`). JSON is asked for (NCCL ≥ 2.28.7: every rank is named); an older NCCL
 * answers in text and the source keeps to text. RAS names nodes by IP address: this node's own
 * addresses become its host name, others through `hosts`, else the address stays the host.
 * RAS names a process by its pid on its node: the collector's rank map (collectors/ranks.ts: the
 * hook's step events it relays, or the process environment on this node) turns (host, pid) into
 * the job and global rank; a process it cannot map is sent without a rank, never guessed.
 */
import { readFile, stat } from 'node:fs/promises';
import { networkInterfaces } from 'node:os';
import { Type } from '@sinclair/typebox';
import type { FaultEvent } from '../../schema/events.js';
import { parseRas, type RasObservation, rasFaultEvent } from '../parsers/nccl_ras.js';
import type { Open } from '../parsers/problems.js';
import { backoffMs, type SourceFactory, sourceName } from '../source.js';
import { queryRas } from './ras_client.js';
import { repeat } from './repeat.js';

export const RAS_DEFAULT_ADDRESS = '127.0.0.1:28028';

const schema = Type.Object(
  {
    type: Type.Literal('nccl_ras'),
    name: Type.Optional(Type.String()),
    address: Type.String({
      default: RAS_DEFAULT_ADDRESS,
      description: 'HOST:PORT of the RAS client socket (NCCL_RAS_ADDR of the job)',
    }),
    path: Type.Optional(
      Type.String({ description: 'a saved ncclras output (text or JSON) to read instead of the port' }),
    ),
    format: Type.Union([Type.Literal('json'), Type.Literal('text')], {
      default: 'json',
      description: 'what to ask RAS for; NCCL older than 2.28.7 answers text either way',
    }),
    verbose: Type.Boolean({
      default: false,
      description: 'VERBOSE STATUS: more outlier ranks named in text',
    }),
    intervalMs: Type.Integer({ minimum: 1000, default: 10_000, description: 'how often to poll' }),
    timeoutS: Type.Integer({
      minimum: 1,
      maximum: 600,
      default: 5,
      description: 'how long RAS waits for the other processes (TIMEOUT)',
    }),
    maxBytes: Type.Integer({ minimum: 1024, default: 64 << 20, description: 'largest report read' }),
    job: Type.Optional(Type.String({ description: 'the job whose NCCL this is' })),
    hosts: Type.Record(Type.String(), Type.String(), {
      default: {},
      description: 'node address as RAS prints it → host name, for other nodes of the job',
    }),
    mismatch: Type.Optional(
      Type.Union([Type.Literal('stalled'), Type.Literal('every')], {
        description:
          'operation-count differences to send: only counts unchanged since the last poll (default on the port) or all (default for a file)',
      }),
    ),
  },
  { additionalProperties: false },
);

/** This node's own addresses → its name, so RAS's IPs of local ranks match other sources' hosts. */
function localAddresses(host: string): Map<string, string> {
  const out = new Map<string, string>();
  for (const list of Object.values(networkInterfaces())) for (const a of list ?? []) out.set(a.address, host);
  return out;
}

export function parseAddress(s: string): { host: string; port: number } | undefined {
  const m = /^\[?([^\]]+?)\]?:(\d{1,5})$/.exec(s.trim());
  const port = m ? Number(m[2]) : Number.NaN;
  return m && port > 0 && port < 65_536 ? { host: m[1], port } : undefined;
}

export const ncclRas: SourceFactory<typeof schema> = {
  type: 'nccl_ras',
  description:
    'NCCL RAS job status (the ncclras port, text or JSON, or a saved output): unresponsive, dead and missing ranks, errors, stalled operation counts',
  schema,
  create(cfg, deps) {
    const name = sourceName('nccl_ras', cfg.name);
    const addr = parseAddress(cfg.address);
    const mismatch = cfg.mismatch ?? (cfg.path ? 'every' : 'stalled');
    const names = new Map([...localAddresses(deps.host), ...Object.entries(cfg.hosts)]);
    const ctx = { host: deps.host, job: cfg.job, hostOf: (node: string) => names.get(node) };
    let format = cfg.format;
    let fileSig = '';
    /** Operation counts of the previous poll's behind/ahead ranks. */
    let lastCounts = new Map<string, number>();

    const handle = (text: string, ts: number) => {
      const { status, problems } = parseRas(text);
      if (problems.length) deps.parseProblems(name, problems);
      const counts = new Map<string, number>();
      const send: RasObservation[] = [];
      for (const o of status.observations) {
        if (o.ras !== 'behind' && o.ras !== 'ahead') {
          send.push(o);
          continue;
        }
        const key = `${o.comm}|${o.commRank}|${o.opRaw}`;
        counts.set(key, o.ops!);
        if (mismatch === 'every' || lastCounts.get(key) === o.ops) send.push(o);
      }
      lastCounts = counts;
      if (send.length) deps.emit(send.map((o) => withRank(rasFaultEvent(o, ts, ctx), o.pid)));
    };

    /** The job and global rank of the process RAS named, where the rank map knows it (the job's own, when one is set). */
    const withRank = (e: Open<FaultEvent>, pid: number | undefined): Open<FaultEvent> => {
      const id = pid !== undefined ? deps.ranks?.lookup(e.host, pid, deps.now()) : undefined;
      if (!id || (cfg.job !== undefined && id.job !== cfg.job)) return e;
      return {
        ...e,
        host: id.host,
        job: id.job,
        rank: id.rank,
        ...(e.gpu === undefined && id.gpu !== undefined ? { gpu: id.gpu } : {}),
      };
    };

    const poll = async () => {
      if (cfg.path) {
        const st = await stat(cfg.path).catch((err: NodeJS.ErrnoException) => {
          throw new Error(`cannot read ${cfg.path}: ${err.code ?? err.message}`);
        });
        const sig = `${st.size}:${st.mtimeMs}`;
        if (sig === fileSig) return;
        fileSig = sig;
        if (st.size > cfg.maxBytes) {
          deps.parseProblems(name, [
            { line: 0, reason: `${cfg.path}: ${st.size} bytes, over maxBytes`, raw: '' },
          ]);
          return;
        }
        handle(await readFile(cfg.path, 'utf8'), Math.floor(st.mtimeMs));
        return;
      }
      if (!addr) throw new Error(`"${cfg.address}" is not HOST:PORT`);
      const answer = await queryRas({
        ...addr,
        format,
        verbose: cfg.verbose,
        timeoutS: cfg.timeoutS,
        maxBytes: cfg.maxBytes,
      });
      if (answer.jsonRefused) {
        format = 'text';
        deps.logger.info(`${name}: this NCCL has no JSON output (before 2.28.7); reading its text`);
      }
      handle(answer.text, deps.now());
    };

    const input = repeat(name, deps, poll, {
      waitMs: () => cfg.intervalMs,
      backoffMs: (n) => Math.max(cfg.intervalMs, backoffMs(n)),
      recovered: `${cfg.path ?? cfg.address} answers again`,
    });
    return { type: 'nccl_ras', name, start: input.start, stop: input.stop };
  },
};
