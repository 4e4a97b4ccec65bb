import { describe, expect, it } from 'vitest';
import { resolveOptions } from '../cli/args.js';
import { ALERT_OPTIONS, alertingFrom, parseRoutes } from './cli-options.js';

/** Alerting as `up` builds it from these flags (as typed) and this environment. */
const alertingOf = (flags: Record<string, string>, env: Record<string, string>) =>
  alertingFrom(resolveOptions(ALERT_OPTIONS, flags, env).values);

describe('alert flags', () => {
  it('nothing asked, nothing runs', () => {
    expect(alertingOf({}, {})).toBeUndefined();
  });

  it('routes name existing sinks, known severities and keys; each mistake is one line', () => {
    const sinks = ['alertmanager', 'webhook-1'];
    expect(
      parseRoutes(
        '[{"severities":["critical"],"sinks":["alertmanager"]},{"types":["xid"],"sinks":[]}]',
        sinks,
      ),
    ).toEqual([
      { severities: ['critical'], sinks: ['alertmanager'], types: undefined },
      { types: ['xid'], sinks: [], severities: undefined },
    ]);
    expect(() => parseRoutes('{', sinks)).toThrow('--alert-routes (RANKWATCH_ALERT_ROUTES): not JSON');
    expect(() => parseRoutes('[{"sinks":["pager"]}]', sinks)).toThrow(
      'route 1: no sink named pager (have alertmanager, webhook-1)',
    );
    expect(() => parseRoutes('[{"sinks":[],"severities":["high"]}]', sinks)).toThrow(
      '"severities" takes info, warning, critical',
    );
    expect(() => parseRoutes('[{"sinks":[],"type":["xid"]}]', sinks)).toThrow('route 1: unknown key type');
  });

  it('--alert-webhook takes comma-separated URLs as the environment does', async () => {
    const a = alertingOf({ 'alert-webhook': 'http://127.0.0.1:9/a,http://127.0.0.1:9/b' }, {});
    expect(a?.sinks.map((s) => s.name)).toEqual(['webhook-1', 'webhook-2']);
    await a?.stop();
  });

  it('the environment stands in for flags', async () => {
    const a = alertingOf({}, { RANKWATCH_ALERT_WEBHOOK: 'http://127.0.0.1:9/a,http://127.0.0.1:9/b' });
    expect(a?.sinks.map((s) => s.name)).toEqual(['webhook-1', 'webhook-2']);
    await a?.stop();
    const routed = alertingOf(
      {},
      { RANKWATCH_ALERT_WEBHOOK: 'http://127.0.0.1:9/a', RANKWATCH_ALERT_ROUTES: '[{"sinks":[]}]' },
    );
    routed?.onFindings([
      {
        id: 'x',
        ts: 1,
        type: 'xid',
        state: 'open',
        host: 'h',
        severity: 'critical',
        evidence: {},
        action: 'drain',
        summary: 's',
      },
    ]);
    expect(routed?.stats()).toMatchObject({ routed: 0, unrouted: 1 });
    await routed?.stop();
    expect(() => alertingOf({ 'alertmanager-url': 'am:9093' }, {})).toThrow(
      '--alertmanager-url (RANKWATCH_ALERTMANAGER_URL) needs an http(s) URL, got "am:9093"',
    );
  });
});
