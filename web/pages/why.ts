/** Why a job has no MFU, from what its summary says (the API gives no figure rather than a wrong one). */
import type { JobRow } from '../api.js';

/** The jobs list reports 0 (not null) for a job without MFU: 0 is never a real MFU, so it is "none". */
export const hasMfu = (j: Pick<JobRow, 'mfu_now'>) => j.mfu_now !== null && j.mfu_now > 0;

export function noMfuReason(j: Pick<JobRow, 'gpu_model' | 'world_size'>): string {
  if (!j.gpu_model && !(j.world_size > 0))
    return 'No MFU: no job description (the `job` event with gpu_model and model or flops_per_step) was received.';
  if (!j.gpu_model) return 'No MFU: the job event names no gpu_model, so the peak FLOP/s is unknown.';
  return `No MFU: either GPU "${j.gpu_model}" has no peak FLOP/s in rankwatch's table for the job's dtype, or the job event gives neither model nor flops_per_step.`;
}
