import { describe, expect, it } from 'vitest';
import { alertingFrom, parseRoutes } from './cli-options.js';

describe('alert flags', () => {
  it('nothing asked, nothing runs', () => {
    expect(alertingFrom({}, {})).toBeUndefined();
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
    expect(() => parseRoutes('{', sinks)).toThrow('--alert-routes: not JSON');
    expect(() => parseRoutes('[{"sinks":["pager"]}]', sinks)).toThrow(
      'route 1: no sink named pager (have alertmanager, webhook-1)',
    );
    expect(() => parseRoutes('[{"sinks":[],"severities":["high"]}]', sinks)).toThrow(
      '"severities" takes info, warning, critical',
    );
    expect(() => parseRoutes('[{"sinks":[],"type":["xid"]}]', sinks)).toThrow('route 1: unknown key type');
  });

  it('--alert-webhook takes comma-separated URLs as the environment does', async () => {
    const a = alertingFrom({ 'alert-webhook': 'http://127.0.0.1:9/a,http://127.0.0.1:9/b' }, {});
    expect(a?.sinks.map((s) => s.name)).toEqual(['webhook-1', 'webhook-2']);
    await a?.stop();
  });

  it('the environment stands in for flags', async () => {
    const a = alertingFrom({}, { RANKWATCH_ALERT_WEBHOOK: 'http://127.0.0.1:9/a,http://127.0.0.1:9/b' });
    expect(a?.sinks.map((s) => s.name)).toEqual(['webhook-1', 'webhook-2']);
    await a?.stop();
    const routed = alertingFrom(
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
    expect(() => alertingFrom({ 'alertmanager-url': 'am:9093' }, {})).toThrow(
      '--alertmanager-url needs an http(s) URL, got "am:9093"',
    );
  });
});
