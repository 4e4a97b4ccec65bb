/**
 * A real `rankwatch up` (the built CLI) fed a simulated job whose GPU on rank 5 throttles and
 * whose NIC under rank 20 slows down, for the browser test and `npm run screenshots`. Its last
 * step is now and its `finished` event is held back, so it shows as running with open findings.
 */
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { postLines, type Running, simLines, startRankwatch, until } from '../tests/helpers.js';

export const DEMO = {
  job: 'llama70b-demo',
  token: 'demo-read-token-0123456789',
  ranks: 32,
  steps: 600,
  stepMs: 1200,
  throttleRank: 5,
  nicRank: 20,
};

/** What the simulator injected (its --truth file): the host, GPU and rank of each fault. */
export interface Injected {
  spec: { type: string };
  host: string;
  gpu: number;
  rank: number;
}

export interface DemoServer {
  url: string;
  truth: Injected[];
  up: Running;
  stop(): Promise<void>;
}

/** `extraFaults`: more sim --fault specs (the screenshots add an XID so the fleet page has a fault). */
export async function startDemo(extraFaults: string[] = []): Promise<DemoServer> {
  const dir = mkdtempSync(join(tmpdir(), 'rankwatch-web-'));
  const up = startRankwatch(['up', '--port', '0', '--data', join(dir, 'data'), '--token', DEMO.token]);
  const stop = async () => {
    await up.stop();
    rmSync(dir, { recursive: true, force: true });
  };
  try {
    const url = await until('the listening line', () => /listening on (http:\/\/\S+)/.exec(up.stdout())?.[1]);
    const truthFile = join(dir, 'truth.json');
    const all = simLines(
      ...['--truth', truthFile],
      ...['--ranks', String(DEMO.ranks), '--steps', String(DEMO.steps), '--seed', '7', '--job', DEMO.job],
      ...['--step-ms', String(DEMO.stepMs), '--start', String(Date.now() - DEMO.steps * DEMO.stepMs)],
      ...[
        '--fault',
        `throttle:rank=${DEMO.throttleRank},at=150`,
        '--fault',
        `nic:rank=${DEMO.nicRank},at=300,factor=4`,
      ],
      ...extraFaults.flatMap((f) => ['--fault', f]),
    );
    const lines = all.filter((l) => !(l.includes('"kind":"job_event"') && l.includes('"event":"finished"')));
    const statuses = await postLines(url, lines, { authorization: `Bearer ${DEMO.token}` }, 5000);
    if (statuses.some((s) => s !== 200)) throw new Error(`ingest answered ${statuses.join(',')}`);
    await until(
      'the throttle and slow_link findings',
      async () => {
        const res = await fetch(`${url}/v1/findings?job=${DEMO.job}&status=open`, {
          headers: { authorization: `Bearer ${DEMO.token}` },
        });
        const { findings } = (await res.json()) as { findings: { type: string }[] };
        const types = new Set(findings.map((f) => f.type));
        return types.has('throttle') && types.has('slow_link') ? true : undefined;
      },
      120_000,
    );
    const truth = JSON.parse(readFileSync(truthFile, 'utf8')) as Injected[];
    return { url, up, truth, stop };
  } catch (err) {
    await stop();
    throw err;
  }
}
