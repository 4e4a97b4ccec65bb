/** Findings reach a real Alertmanager (Debian's 0.25): they arrive, deduplicate and resolve, as its own API says. */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Alerting } from '../alerts/alerting.js';
import type { Finding } from '../schema/finding.js';
import { startAlertmanager } from './setup/alertmanager.js';

interface GettableAlert {
  labels: Record<string, string>;
  annotations: Record<string, string>;
  status: { state: string };
  startsAt: string;
  endsAt: string;
}

let am: { url: string; stop(): Promise<void> };
beforeAll(async () => {
  // A short resolve_timeout shows that re-sending is what keeps an open alert alive.
  am = await startAlertmanager('3s');
});
afterAll(async () => am?.stop());

const alerts = async (): Promise<GettableAlert[]> => {
  const res = await fetch(`${am.url}/api/v2/alerts`);
  expect(res.status).toBe(200);
  return (await res.json()) as GettableAlert[];
};
const mine = async (host: string) => (await alerts()).filter((a) => a.labels.host === host);
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

let seq = 0;
function finding(host: string, over: Partial<Finding> = {}): Finding {
  const now = Date.now();
  return {
    id: `xid-${host}-${++seq}`,
    ts: now,
    onset_ts: now - 1_000,
    type: 'xid',
    state: 'open',
    job: 'llama-70b',
    host,
    gpu: 2,
    severity: 'critical',
    evidence: { code: 79 },
    est_cost_pct: 12.5,
    action: 'drain',
    summary: `${host}/2: XID 79 (GPU has fallen off the bus); recovery: reboot_node.`,
    ...over,
  };
}

describe('Alertmanager v2', () => {
  it('an open finding arrives with dedup labels and annotations; duplicates stay one alert; it resolves with the last finding', async () => {
    const a = new Alerting({ alertmanager: { url: am.url, linkBase: 'http://rankwatch.example:7070' } });
    const f1 = finding('am-host-1');
    a.onFindings([f1]);
    await a.flushed();
    const [got] = await mine('am-host-1');
    expect(got.labels).toEqual({
      alertname: 'rankwatch_xid',
      job: 'llama-70b',
      host: 'am-host-1',
      gpu: '2',
      type: 'xid',
      severity: 'critical',
    });
    expect(got.annotations).toMatchObject({
      summary: f1.summary,
      cost: "12.5% of the job's throughput",
      link: `http://rankwatch.example:7070/v1/findings/${f1.id}`,
      finding_id: f1.id,
    });
    expect(got.status.state).toBe('active');

    // Updates of f1 and a second incident with the same labels: still one alert.
    const f2 = finding('am-host-1');
    a.onFindings([
      { ...f1, state: 'update', ts: Date.now() },
      f2,
      { ...f1, state: 'update', ts: Date.now() },
    ]);
    await a.flushed();
    expect(await mine('am-host-1')).toHaveLength(1);

    // One of the two resolves: the alert stays; the last resolves: it is gone from the active list.
    a.onFindings([{ ...f1, state: 'resolved', ts: Date.now() }]);
    await a.flushed();
    expect(await mine('am-host-1')).toHaveLength(1);
    a.onFindings([{ ...f2, state: 'resolved', ts: Date.now() }]);
    await a.flushed();
    await sleep(50);
    expect(await mine('am-host-1')).toEqual([]);
    expect(a.stats()).toMatchObject({ alertmanager: { failed: 0, open_alerts: 0 } });
    await a.stop();
  });

  it('an open alert is re-sent before resolve_timeout and stays active; without re-sending it times out', async () => {
    const kept = new Alerting({ alertmanager: { url: am.url, resendMs: 1_000 } });
    const dropped = new Alerting({ alertmanager: { url: am.url, resendMs: 3_600_000 } });
    kept.start();
    dropped.start();
    kept.onFindings([finding('am-kept')]);
    dropped.onFindings([finding('am-dropped')]);
    await Promise.all([kept.flushed(), dropped.flushed()]);
    await sleep(4_500);
    expect(await mine('am-kept')).toHaveLength(1);
    expect(await mine('am-dropped')).toEqual([]);
    await kept.stop();
    await dropped.stop();
  });

  it('a severity change moves the finding to a new alert and resolves the old one', async () => {
    const a = new Alerting({ alertmanager: { url: am.url } });
    const f = finding('am-sev', { severity: 'warning', action: 'cordon' });
    a.onFindings([f]);
    await a.flushed();
    a.onFindings([{ ...f, state: 'update', severity: 'critical', ts: Date.now() }]);
    await a.flushed();
    await sleep(50);
    expect((await mine('am-sev')).map((x) => x.labels.severity)).toEqual(['critical']);
    await a.stop();
  });

  it('an unreachable Alertmanager never blocks: sends return at once and failures are counted', async () => {
    const a = new Alerting({ alertmanager: { url: 'http://127.0.0.1:9', attempts: 2, queueSize: 3 } });
    const t0 = Date.now();
    a.onFindings(Array.from({ length: 10 }, (_, i) => finding(`down-${i}`)));
    expect(Date.now() - t0).toBeLessThan(50);
    await a.flushed();
    const s = a.stats().alertmanager as Record<string, number>;
    // Ten alerts into a queue of three: the oldest were dropped and counted, the rest failed.
    expect(s.dropped_full).toBeGreaterThan(0);
    expect(s.failed + s.sent + s.dropped_full).toBe(10);
    expect(s.sent).toBe(0);
    await a.stop();
  });
});
