import { afterEach, describe, expect, it, vi } from 'vitest';
import { ERRORS, type ErrorCode, isRetriable, RankwatchError, retry } from './errors.js';

const retriable = (n = 0) => new RankwatchError('RANKWATCH_ERR_STORE_UNAVAILABLE', `down ${n}`);
const fatal = () => new RankwatchError('RANKWATCH_ERR_STORE_QUERY', 'bad statement');

/** A function that fails with `errs[i]` on call i, then returns 'ok'; records when it was called. */
function flaky(errs: Error[]) {
  const calls: number[] = [];
  const fn = vi.fn(async () => {
    calls.push(performance.now());
    const err = errs[calls.length - 1];
    if (err) throw err;
    return 'ok';
  });
  return { fn, calls };
}

describe('RankwatchError', () => {
  it('every catalogue code has a non-empty hint and a boolean retriable', () => {
    const codes = Object.keys(ERRORS) as ErrorCode[];
    expect(codes.length).toBeGreaterThan(0);
    for (const code of codes) {
      expect(typeof ERRORS[code].hint, code).toBe('string');
      expect(ERRORS[code].hint.trim().length, code).toBeGreaterThan(0);
      expect(typeof ERRORS[code].retriable, code).toBe('boolean');
      const err = new RankwatchError(code, 'x');
      expect(err.hint).toBe(ERRORS[code].hint);
      expect(err.retriable).toBe(ERRORS[code].retriable);
      expect(isRetriable(err)).toBe(ERRORS[code].retriable);
    }
    expect(codes.filter((c) => ERRORS[c].retriable).sort()).toEqual([
      'RANKWATCH_ERR_API_UNAVAILABLE',
      'RANKWATCH_ERR_CORDON_FAILED',
      'RANKWATCH_ERR_INGEST_BUSY',
      'RANKWATCH_ERR_JOURNAL_WRITE',
      'RANKWATCH_ERR_SINK_UNAVAILABLE',
      'RANKWATCH_ERR_STORE_UNAVAILABLE',
      'RANKWATCH_ERR_TRANSPORT_UNAVAILABLE',
    ]);
  });

  it('describe() gives the code, the message and the hint', () => {
    const err = new RankwatchError('RANKWATCH_ERR_CONFIG', 'store.url is not a URL');
    const text = err.describe();
    expect(text).toContain('RANKWATCH_ERR_CONFIG');
    expect(text).toContain('store.url is not a URL');
    expect(text).toContain(ERRORS.RANKWATCH_ERR_CONFIG.hint);
    expect(text).toBe(`RANKWATCH_ERR_CONFIG: store.url is not a URL\n  ${ERRORS.RANKWATCH_ERR_CONFIG.hint}`);
  });

  it('is an Error with its name, code and cause', () => {
    const cause = new Error('ECONNREFUSED');
    const err = new RankwatchError('RANKWATCH_ERR_STORE_UNAVAILABLE', 'no store', { cause });
    expect(err).toBeInstanceOf(Error);
    expect(err.name).toBe('RankwatchError');
    expect(err.code).toBe('RANKWATCH_ERR_STORE_UNAVAILABLE');
    expect(err.cause).toBe(cause);
    expect(isRetriable(new Error('plain'))).toBe(false);
    expect(isRetriable('RANKWATCH_ERR_STORE_UNAVAILABLE')).toBe(false);
  });
});

describe('retry', () => {
  afterEach(() => {
    vi.useRealTimers();
  });

  it('returns the first success', async () => {
    const { fn } = flaky([retriable(1), retriable(2)]);
    await expect(retry(fn, { baseDelayMs: 1, attempts: 5 })).resolves.toBe('ok');
    expect(fn).toHaveBeenCalledTimes(3);
  });

  it('retries a retriable error up to `attempts` calls, then throws the last error', async () => {
    const errs = [retriable(1), retriable(2), retriable(3), retriable(4)];
    const { fn } = flaky(errs);
    await expect(retry(fn, { baseDelayMs: 1, attempts: 3 })).rejects.toBe(errs[2]);
    expect(fn).toHaveBeenCalledTimes(3);
  });

  it('calls once when attempts is 1', async () => {
    const errs = [retriable(1), retriable(2)];
    const { fn } = flaky(errs);
    await expect(retry(fn, { baseDelayMs: 1, attempts: 1 })).rejects.toBe(errs[0]);
    expect(fn).toHaveBeenCalledTimes(1);
  });

  it('does not retry a non-retriable RankwatchError', async () => {
    const err = fatal();
    const { fn } = flaky([err, retriable()]);
    const onRetry = vi.fn();
    await expect(retry(fn, { baseDelayMs: 1, attempts: 5, onRetry })).rejects.toBe(err);
    expect(fn).toHaveBeenCalledTimes(1);
    expect(onRetry).not.toHaveBeenCalled();
  });

  it('does not retry a plain Error', async () => {
    const err = new Error('ECONNRESET');
    const { fn } = flaky([err]);
    await expect(retry(fn, { baseDelayMs: 1, attempts: 5 })).rejects.toBe(err);
    expect(fn).toHaveBeenCalledTimes(1);
  });

  it('stops at a non-retriable error met after retriable ones', async () => {
    const errs = [retriable(1), fatal(), retriable(3)];
    const { fn } = flaky(errs);
    await expect(retry(fn, { baseDelayMs: 1, attempts: 10 })).rejects.toBe(errs[1]);
    expect(fn).toHaveBeenCalledTimes(2);
  });

  it('calls onRetry with (err, attempt, delay), the delay doubling up to maxDelayMs', async () => {
    const errs = Array.from({ length: 6 }, (_, i) => retriable(i));
    const { fn } = flaky(errs);
    const onRetry = vi.fn();
    await expect(retry(fn, { baseDelayMs: 5, maxDelayMs: 30, attempts: 6, onRetry })).rejects.toBe(errs[5]);
    expect(fn).toHaveBeenCalledTimes(6);
    expect(onRetry.mock.calls).toEqual([
      [errs[0], 1, 5],
      [errs[1], 2, 10],
      [errs[2], 3, 20],
      [errs[3], 4, 30],
      [errs[4], 5, 30],
    ]);
  });

  it('with jitter, each delay lies between half and all of the unjittered one', async () => {
    const errs = Array.from({ length: 6 }, (_, i) => retriable(i));
    const { fn } = flaky(errs);
    const onRetry = vi.fn();
    await expect(
      retry(fn, { baseDelayMs: 4, maxDelayMs: 16, attempts: 6, jitter: true, onRetry }),
    ).rejects.toBe(errs[5]);
    const full = [4, 8, 16, 16, 16];
    onRetry.mock.calls.forEach(([, , d], i) => {
      expect(d).toBeGreaterThanOrEqual(full[i] / 2);
      expect(d).toBeLessThanOrEqual(full[i]);
    });
  });

  it('waits at least each delay between calls', async () => {
    const errs = Array.from({ length: 4 }, (_, i) => retriable(i));
    const { fn, calls } = flaky(errs);
    const started = performance.now();
    await expect(retry(fn, { baseDelayMs: 20, maxDelayMs: 60, attempts: 5 })).resolves.toBe('ok');
    const elapsed = performance.now() - started;
    const gaps = calls.slice(1).map((t, i) => t - calls[i]);
    // Timers never fire early (allow a millisecond of clock granularity); late is fine.
    const delays = [20, 40, 60, 60];
    for (const [i, d] of delays.entries()) expect(gaps[i], `gap ${i}`).toBeGreaterThanOrEqual(d - 2);
    expect(elapsed).toBeGreaterThanOrEqual(180 - 4);
    expect(elapsed).toBeLessThan(180 + 800);
  });

  it('defaults to 5 attempts starting at 100 ms', async () => {
    vi.useFakeTimers();
    const errs = Array.from({ length: 8 }, (_, i) => retriable(i));
    const { fn } = flaky(errs);
    const onRetry = vi.fn();
    const p = retry(fn, { onRetry });
    const settled = expect(p).rejects.toBe(errs[4]);
    await vi.runAllTimersAsync();
    await settled;
    expect(fn).toHaveBeenCalledTimes(5);
    expect(onRetry.mock.calls.map((c) => c[2])).toEqual([100, 200, 400, 800]);
  });

  it('caps the delay at the default maxDelayMs of 5 s', async () => {
    vi.useFakeTimers();
    const errs = Array.from({ length: 10 }, (_, i) => retriable(i));
    const { fn } = flaky(errs);
    const onRetry = vi.fn();
    const p = retry(fn, { baseDelayMs: 1000, attempts: 6, onRetry });
    const settled = expect(p).rejects.toBe(errs[5]);
    await vi.runAllTimersAsync();
    await settled;
    expect(onRetry.mock.calls.map((c) => c[2])).toEqual([1000, 2000, 4000, 5000, 5000]);
  });

  it('with attempts Infinity, stops at the failure after the signal is aborted', async () => {
    const ac = new AbortController();
    const errs: Error[] = [];
    const fn = vi.fn(async () => {
      const err = retriable(errs.length);
      errs.push(err);
      if (errs.length === 3) ac.abort();
      throw err;
    });
    const thrown = await retry(fn, { baseDelayMs: 1, attempts: Infinity, signal: ac.signal }).catch((e) => e);
    expect(fn).toHaveBeenCalledTimes(3);
    expect(thrown).toBe(errs[2]);
  });

  it('an abort in onRetry ends the retries at once, with the error just seen', async () => {
    const ac = new AbortController();
    const errs = Array.from({ length: 10 }, (_, i) => retriable(i));
    const { fn } = flaky(errs);
    const onRetry = vi.fn((_err: unknown, attempt: number) => {
      if (attempt === 2) ac.abort();
    });
    await expect(retry(fn, { baseDelayMs: 1, attempts: Infinity, signal: ac.signal, onRetry })).rejects.toBe(
      errs[1],
    );
    expect(fn).toHaveBeenCalledTimes(2);
    expect(onRetry).toHaveBeenCalledTimes(2);
  });

  it('an abort during a long backoff wait ends it without waiting it out', async () => {
    const ac = new AbortController();
    const errs = Array.from({ length: 10 }, (_, i) => retriable(i));
    const { fn } = flaky(errs);
    const started = Date.now();
    const done = retry(fn, {
      baseDelayMs: 60_000,
      maxDelayMs: 60_000,
      attempts: Infinity,
      signal: ac.signal,
    });
    setTimeout(() => ac.abort(), 50);
    await expect(done).rejects.toBe(errs[0]);
    expect(Date.now() - started).toBeLessThan(5_000);
    expect(fn).toHaveBeenCalledTimes(1);
  });

  it('an already-aborted signal allows one call and no retry', async () => {
    const ac = new AbortController();
    ac.abort();
    const errs = [retriable(0), retriable(1)];
    const { fn } = flaky(errs);
    await expect(retry(fn, { baseDelayMs: 1, attempts: 5, signal: ac.signal })).rejects.toBe(errs[0]);
    expect(fn).toHaveBeenCalledTimes(1);
  });
});
