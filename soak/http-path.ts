/**
 * collect → `rankwatch up` (chDB), while the harness SIGKILLs `up`, fills and freezes its disk,
 * and rotates the ingest token under a running collector.
 */
import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { type Accounting, account, replayFindings } from './account.js';
import { type CollectorDrops, startCollector as collector, collectorDrops, quiet } from './collector.js';
import { Disk, spaceRefusals } from './disk.js';
import { type Fault, faultsRun, feedCollector } from './feed.js';
import type { SoakPathOptions } from './input.js';
import { answering, freePort, Proc, sleep, startChdbServer, stopAll } from './procs.js';

export async function httpPath(o: SoakPathOptions): Promise<Accounting> {
  const disk = new Disk(o.dir, 'up-data');
  const diskFaults = await disk.mount(1024);
  const spool = join(o.dir, 'collector-spool');
  mkdirSync(spool, { recursive: true });
  const upPort = await freePort();
  const colPort = await freePort();
  let upToken = 'soak-token-1';
  let up: Proc | undefined;
  let col: Proc | undefined;
  const drops: CollectorDrops = { refusedByBus: 0, other: {} };
  const procs: Proc[] = [];

  const startUp = async () => {
    up = Proc.cli('up', ['up', '--port', String(upPort), '--data', disk.dir, '--token', upToken]);
    procs.push(up);
    await answering(`http://127.0.0.1:${upPort}/healthz`);
  };
  const startCollector = async (token: string) => {
    col = await collector(`http://127.0.0.1:${upPort}`, spool, colPort, ['--token', token]);
    procs.push(col);
  };
  const stopCollector = async () => {
    await collectorDrops(colPort, drops);
    await col?.stop('SIGTERM');
  };

  try {
    await startUp();
    await startCollector(upToken);
    const faults: Fault[] = [
      {
        at: 0.2,
        name: 'SIGKILL rankwatch up, restart after 2 s',
        run: async () => {
          await up?.stop('SIGKILL');
          await sleep(2_000);
          await startUp();
        },
      },
      {
        at: 0.55,
        name: 'rotate the ingest token: up restarts with a new one, the collector keeps the old for 5 s',
        run: async () => {
          upToken = 'soak-token-2';
          await up?.stop('SIGTERM');
          await startUp();
          await sleep(5_000);
          await stopCollector();
          await startCollector(upToken);
        },
      },
      {
        at: 0.85,
        name: 'SIGKILL rankwatch up again, restart after 1 s',
        run: async () => {
          await up?.stop('SIGKILL');
          await sleep(1_000);
          await startUp();
        },
      },
    ];
    if (diskFaults) faults.push(disk.fullFor(0.35, 6_000, () => spaceRefusals(procs)));
    const fed = await feedCollector({ lines: o.input.fed, colPort, seconds: o.seconds, faults, log: o.log });
    o.log(`fed ${fed.accepted} accepted, ${fed.rejected} rejected; waiting for the collector to deliver`);
    await quiet(colPort, `http://127.0.0.1:${upPort}/healthz`);
    await stopCollector();
    const upExit = await up?.stop('SIGTERM');
    if (upExit !== 0) o.log(`rankwatch up exited with ${upExit}:\n${up?.log().slice(-2000)}`);
    const replay = await replayFindings(o.input, [], o.dir);
    const storePort = await freePort();
    const store = await startChdbServer(disk.dir, storePort);
    procs.push(store);
    return await account({
      path: 'collect → up (HTTP, chDB)',
      url: `http://127.0.0.1:${storePort}`,
      input: o.input,
      refusedAtIngest: fed.rejected,
      drops,
      replay,
      faults: faultsRun(fed.faults, diskFaults),
    });
  } finally {
    await stopAll(procs, o.dir);
    await disk.unmount();
  }
}
