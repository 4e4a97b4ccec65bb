/**
 * What the runner says once per job about its MFU: a figure that cannot be true
 * (`mfu_implausible`, with the input that is likely wrong), or no MFU at all (`mfu_unavailable`,
 * with the field to set). Both are info-level findings with no action: the job is fine, its
 * description is not. They resolve when the job ends.
 */
import type { FindingLog } from '../findings.js';
import { findingId } from '../findings.js';

export function noteMfu(
  log: FindingLog,
  job: string,
  type: 'mfu_implausible' | 'mfu_unavailable',
  ts: number,
  reason: string,
  evidence: Record<string, unknown> = {},
): void {
  const lead =
    type === 'mfu_implausible' ? `MFU of job ${job} is not shown as true` : `No MFU for job ${job}`;
  log.openFinding(findingId(type, job), ts, {
    type,
    job,
    host: '',
    severity: 'info',
    action: 'none',
    evidence: { reason, ...evidence },
    summary: `${lead}: ${reason}.`,
  });
}

/** A job that now gets MFU (its job event came after its first steps): its mfu_unavailable ends. */
export function resolveMfuUnavailable(log: FindingLog, job: string, ts: number): boolean {
  const id = findingId('mfu_unavailable', job);
  if (!log.get(id)) return false;
  log.resolve(id, ts, {
    summary: `MFU of job ${job} is computed now: its job event gives what was missing.`,
  });
  return true;
}
