import { describe, expect, it } from 'vitest';
import { ClusterSim } from './cluster.js';
import { checkFault, formatFault, parseFault } from './faults.js';

const job = { ranks: 64, steps: 120, hosts: 8, gpusPerHost: 8 };

describe('checkFault', () => {
  it.each([
    ['throttle:rank=64', /rank 64 is not in the job \(ranks 0 to 63\)/],
    ['power_brake:host=8', /host 8 is not in the job \(hosts 0 to 7\)/],
    ['nic:host=1,gpu=8', /gpu 8 is not in the job/],
    ['link:rank=1,peer=64', /rank 64 is not in the job/],
    ['link:rank=1', /needs peer=/],
    ['slow_rank:at=3', /needs rank= or host=/],
    ['throttle:rank=3,at=120', /at=120 is past the last step \(119\)/],
    ['throttle:rank=3,at=50,until=40', /until=40 is before at=50/],
    ['throttle:rank=3,depth=1.5', /depth is a fraction/],
    ['throttle:rank=2.5', /rank must be a whole number/],
    ['intermittent:rank=3,every=0', /every must be at least 1/],
    ['stall:rank=3,every=10,jitter=10', /jitter=10 must be below every=10/],
  ])('refuses %s', (text, why) => {
    expect(() => checkFault(parseFault(text), job)).toThrow(why);
  });

  it('accepts faults inside the job, up to the last step', () => {
    for (const f of [
      'throttle:rank=63,at=119',
      'power_brake:host=7',
      'link:rank=0,peer=63',
      'nic:host=7,gpu=7',
    ])
      expect(() => checkFault(parseFault(f), job)).not.toThrow();
  });

  it('reads a stall length as a range of seconds, or one number, and writes it back the same way', () => {
    expect(parseFault('stall:rank=3,at=40,every=50,jitter=5,stall=3-6')).toMatchObject({
      type: 'stall',
      every: 50,
      jitter: 5,
      stall: [3, 6],
    });
    expect(parseFault('stall:rank=3,stall=2.5').stall).toEqual([2.5, 2.5]);
    expect(formatFault(parseFault('stall:rank=3,at=40,stall=3-6'))).toBe(
      'stall:rank=3,at=40,every=50,jitter=5,stall=3-6',
    );
    for (const bad of ['stall=6-3', 'stall=0', 'stall=3-', 'stall=a-b', 'stall'])
      expect(() => parseFault(`stall:rank=3,${bad}`)).toThrow(/stall needs seconds as A-B/);
  });

  it('is what the simulator applies, as a usage error', () => {
    expect(
      () => new ClusterSim({ ranks: 64, steps: 120, faults: [parseFault('nic:rank=200,at=100')] }),
    ).toThrow(expect.objectContaining({ code: 'RANKWATCH_ERR_USAGE' }));
  });
});
