/**
 * What `rankwatch up` says while a node goes through repair, as its user reads it (the built CLI,
 * dry-run, no scheduler): an Xid 79 opens as a FOUND line; a check dated before the repair
 * finished is not set aside in silence (a warning line, `ignored_check` in GET /v1/actions); and
 * when passing checks verify the node, the Xid finding the repair loop resolves is a RESOLVED line.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  listeningUrl,
  passingCheck,
  postLines,
  type Running,
  startRankwatch,
  until,
  xidFaultLine,
} from './helpers.js';

const dir = mkdtempSync(join(tmpdir(), 'rankwatch-up-repair-'));
const HOST = 'gpu-0031';
let up: Running;
let url = '';

beforeAll(async () => {
  up = startRankwatch(['up', '--port', '0', '--data', join(dir, 'data')]);
  url = await listeningUrl(up);
}, 120_000);

afterAll(() => {
  up.kill();
  rmSync(dir, { recursive: true, force: true });
});

const post = (path: string, body: unknown) =>
  fetch(`${url}${path}`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify(body),
  });

describe('rankwatch up through a repair', () => {
  it('says a check dated before the repair finished is ignored, and prints RESOLVED for the Xid it verifies', async () => {
    expect(await postLines(url, [xidFaultLine(HOST)])).toEqual([200]);
    await until('the FOUND line', () => (/FOUND\s+xid\s.*gpu-0031\/0/.test(up.stdout()) ? true : undefined));
    await until('the host cordoned in health', async () => {
      const a = (await (await fetch(`${url}/v1/actions`)).json()) as {
        nodes: { host: string; state: string }[];
      };
      return a.nodes.some((n) => n.host === HOST && n.state === 'cordoned') ? true : undefined;
    });
    expect((await post(`/v1/nodes/${HOST}/repair`, { phase: 'start' })).status).toBe(200);
    expect((await post(`/v1/nodes/${HOST}/repair`, { phase: 'finish' })).status).toBe(200);

    // A run from before the repair (say, the one that found the fault): it proves nothing, said so.
    const early = passingCheck(HOST, 'nccl-tests', Date.now() - 60_000);
    expect(await postLines(url, [JSON.stringify(early)])).toEqual([200]);
    await until('the ignored-check line', () =>
      /check gpu-0031: nccl-tests passed at \S+, dated before the repair finished at \S+: ignored; only checks run after it count/.test(
        up.stderr(),
      )
        ? true
        : undefined,
    );
    const nodes = (
      (await (await fetch(`${url}/v1/actions`)).json()) as {
        nodes: { host: string; state: string; ignored_check?: string }[];
      }
    ).nodes;
    expect(nodes.find((n) => n.host === HOST)).toMatchObject({
      state: 'verifying',
      ignored_check: expect.stringMatching(/^nccl-tests passed at .*dated before the repair finished/),
    });
    expect(up.stdout()).not.toMatch(/RESOLVED\s+xid/);

    const now = Date.now();
    const checks = [passingCheck(HOST, 'nccl-tests', now + 1), passingCheck(HOST, 'dcgm-diag', now + 2)];
    expect(
      await postLines(
        url,
        checks.map((c) => JSON.stringify(c)),
      ),
    ).toEqual([200]);
    await until('the RESOLVED line', () =>
      /RESOLVED\s+xid\s.*gpu-0031\/0.*: verified after repair \(rankwatch\)/.test(up.stdout())
        ? true
        : undefined,
    );
  }, 120_000);
});
