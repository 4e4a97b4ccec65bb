/** One POST with a timeout; 5xx, 429 and network errors are retriable, other refusals are not. */
import { RankwatchError } from '../core/errors.js';

export async function postJson(
  url: string,
  body: string,
  headers: Record<string, string>,
  timeoutMs: number,
): Promise<void> {
  let res: Response;
  try {
    res = await fetch(url, {
      method: 'POST',
      headers: { 'content-type': 'application/json', ...headers },
      body,
      signal: AbortSignal.timeout(timeoutMs),
    });
  } catch (err) {
    throw new RankwatchError(
      'RANKWATCH_ERR_SINK_UNAVAILABLE',
      `${url} is unreachable: ${(err as Error).message}`,
      {
        cause: err,
      },
    );
  }
  const text = await res.text().catch(() => '');
  if (res.ok) return;
  const code =
    res.status >= 500 || res.status === 429
      ? 'RANKWATCH_ERR_SINK_UNAVAILABLE'
      : 'RANKWATCH_ERR_SINK_REJECTED';
  throw new RankwatchError(code, `${url} answered ${res.status}: ${text.slice(0, 200)}`);
}
