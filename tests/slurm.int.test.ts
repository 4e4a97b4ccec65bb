/** The Slurm cordon driver against a real one-machine cluster (Debian's slurmctld + slurmd 22.05). */
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { SlurmDriver } from '../actions/drivers/slurm.js';
import { startSlurm } from './setup/slurm.js';

const run = promisify(execFile);
let slurm: { conf: string; stop(): Promise<void> };
beforeAll(async () => {
  slurm = await startSlurm(['rwnode1', 'rwnode2']);
}, 300_000);
afterAll(async () => slurm?.stop());

/** What `scontrol show node` says, read by the test itself. */
async function show(node: string): Promise<{ state: string; reason: string }> {
  const { stdout } = await run('scontrol', ['show', 'node', node], {
    env: { ...process.env, SLURM_CONF: slurm.conf },
  });
  return {
    state: /State=(\S+)/.exec(stdout)?.[1] ?? '',
    reason: /Reason=(.*)$/m.exec(stdout)?.[1]?.trim() ?? '',
  };
}

describe('Slurm driver (real slurmctld)', () => {
  it('drains a node with the rankwatch reason, reads it back, and resumes it', async () => {
    const d = new SlurmDriver({ slurmConf: slurm.conf });
    await d.cordon({
      host: 'rwnode1',
      findingId: 'xid-9f2',
      findingType: 'xid',
      reason: 'xid xid-9f2: XID 79 on gpu 2',
    });
    const s = await show('rwnode1');
    expect(s.state).toMatch(/DRAIN/);
    expect(s.reason).toMatch(/^rankwatch: xid xid-9f2: XID 79 on gpu 2 \[/);
    expect(await d.state('rwnode1')).toEqual({
      out: true,
      byRankwatch: true,
      reason: 'rankwatch: xid xid-9f2: XID 79 on gpu 2',
    });
    await d.uncordon('rwnode1');
    expect((await show('rwnode1')).state).not.toMatch(/DRAIN/);
    expect(await d.state('rwnode1')).toMatchObject({ out: false, byRankwatch: false });
  });

  it('a node a person drained reads as out, not by rankwatch', async () => {
    await run('scontrol', ['update', 'nodename=rwnode2', 'state=drain', 'reason=bad DIMM, ticket 4411'], {
      env: { ...process.env, SLURM_CONF: slurm.conf },
    });
    const d = new SlurmDriver({ slurmConf: slurm.conf });
    expect(await d.state('rwnode2')).toEqual({
      out: true,
      byRankwatch: false,
      reason: 'bad DIMM, ticket 4411',
    });
  });

  it('an unknown node is refused for good; a name that is not a node name is never passed on', async () => {
    const d = new SlurmDriver({ slurmConf: slurm.conf });
    await expect(
      d.cordon({ host: 'nosuch', findingId: 'f', findingType: 'xid', reason: 'r' }),
    ).rejects.toMatchObject({
      code: 'RANKWATCH_ERR_CORDON_REFUSED',
    });
    await expect(
      d.cordon({ host: 'rwnode[1-2]', findingId: 'f', findingType: 'xid', reason: 'r' }),
    ).rejects.toMatchObject({
      code: 'RANKWATCH_ERR_CORDON_REFUSED',
    });
  });
});
