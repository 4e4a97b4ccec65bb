/**
 * Fault triage as data: what each XID asks of the node, from NVIDIA's Xid catalog for Ampere and
 * newer GPUs (https://docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html, column
 * "Resolution Bucket (Immediate Action)"; `bucket` below is that column's word for the row) and
 * NVML's GPU recovery actions for Xid 154. Our action classes, least to most disruptive:
 *
 * - `record`      the catalog says IGNORE, or the event is informational: store it, act on nothing;
 * - `restart_app` RESTART_APP: the application's fault; never a cordon on its own (repeats on one
 *                 GPU escalate, see triage config);
 * - `reset_gpu`   RESET_GPU / WORKFLOW_NVLINK_ERR: take the GPU out, `nvidia-smi -r`;
 * - `reboot_node` RESTART_BM: reboot the bare-metal node (drain it first);
 * - `drain_reset` WORKFLOW_XID_48 with a remap event, Xid 154 "Drain P2P" / "Drain and Reset";
 * - `rma`         a failure NVIDIA's RMA policy names (row-remapping failure).
 *
 * `drivers` says for which drivers the row holds as written; `gpus` the catalog's "Applies to".
 */

export type ActionClass = 'record' | 'restart_app' | 'reset_gpu' | 'reboot_node' | 'drain_reset' | 'rma';

/** Least to most disruptive: of two verdicts on one GPU the later in this list wins. */
export const ACTION_ORDER: ActionClass[] = [
  'record',
  'restart_app',
  'reset_gpu',
  'reboot_node',
  'drain_reset',
  'rma',
];

export interface TriageRow {
  code: number;
  name: string;
  /** The catalog's immediate-action bucket, as printed. */
  bucket: string;
  action: ActionClass;
  /** An application fault: alone it proposes no cordon; repeats on one GPU escalate. */
  app?: true;
  /** NVLink5 errors: the driver's Xid 154 that follows says what the GPU needs; wait for it. */
  awaits154?: true;
  gpus: string;
  drivers: string;
  /** Where the row's verdict comes from, when it is not the catalog's bucket alone. */
  note?: string;
}

const AMPERE_ON = 'A100, H100, B100, GB200';
const ALL_DRIVERS = 'current data-center branches (the catalog states no driver range for the row)';
const NVL5_DRIVERS = 'R570 and later; intrInfo decode differs before and from R575 (NVIDIA/NVSentinel#748)';

/** The XIDs training clusters see. An unknown code is recorded for a person, never acted on. */
// biome-ignore format: one row per line reads as the table it is
export const TRIAGE: readonly TriageRow[] = [
  { code: 8, name: 'GPU stopped processing (idle timeout)', bucket: 'RESTART_APP', action: 'restart_app', app: true, gpus: AMPERE_ON, drivers: ALL_DRIVERS },
  { code: 13, name: 'Graphics engine exception', bucket: 'RESTART_APP', action: 'restart_app', app: true, gpus: AMPERE_ON, drivers: ALL_DRIVERS, note: 'WORKFLOW_XID_13: repeats on one GPU point at hardware' },
  { code: 31, name: 'GPU memory page fault', bucket: 'RESTART_APP', action: 'restart_app', app: true, gpus: AMPERE_ON, drivers: ALL_DRIVERS, note: 'WORKFLOW_XID_31: repeats on the same GPU point at hardware, on different GPUs at the app' },
  { code: 43, name: 'GPU stopped processing', bucket: 'RESTART_APP', action: 'restart_app', app: true, gpus: AMPERE_ON, drivers: ALL_DRIVERS },
  { code: 45, name: 'Preemptive cleanup, due to previous errors', bucket: 'WORKFLOW_XID_45', action: 'restart_app', app: true, gpus: AMPERE_ON, drivers: ALL_DRIVERS, note: 'secondary: alone an app cleanup, with another Xid that Xid decides' },
  { code: 48, name: 'Double-bit ECC error', bucket: 'WORKFLOW_XID_48', action: 'drain_reset', gpus: AMPERE_ON, drivers: ALL_DRIVERS, note: 'solo RESET_GPU, with Xid 63/64 DRAIN_AND_RESET: we take the safer of the two' },
  { code: 61, name: 'Internal micro-controller breakpoint/warning', bucket: 'RESET_GPU', action: 'reset_gpu', gpus: AMPERE_ON, drivers: ALL_DRIVERS },
  { code: 62, name: 'Internal micro-controller halt', bucket: 'RESET_GPU', action: 'reset_gpu', gpus: AMPERE_ON, drivers: ALL_DRIVERS },
  { code: 63, name: 'ECC page retirement or row remapping recorded', bucket: 'IGNORE', action: 'record', gpus: AMPERE_ON, drivers: ALL_DRIVERS, note: 'the remap takes effect at the next GPU reset; act only if Xid 64 follows' },
  { code: 64, name: 'ECC page retirement or row remapping failure', bucket: 'RESET_GPU', action: 'rma', gpus: AMPERE_ON, drivers: ALL_DRIVERS, note: 'a row-remapping failure is an RMA threshold in NVIDIA\'s memory error management notes' },
  { code: 74, name: 'NVLink error', bucket: 'WORKFLOW_NVLINK_ERR', action: 'reset_gpu', gpus: 'A100, H100', drivers: ALL_DRIVERS },
  { code: 79, name: 'GPU has fallen off the bus', bucket: 'RESTART_BM', action: 'reboot_node', gpus: AMPERE_ON, drivers: ALL_DRIVERS },
  { code: 92, name: 'High single-bit ECC error rate', bucket: 'IGNORE', action: 'record', gpus: AMPERE_ON, drivers: ALL_DRIVERS },
  { code: 94, name: 'Contained ECC error', bucket: 'RESTART_APP', action: 'restart_app', app: true, gpus: AMPERE_ON, drivers: ALL_DRIVERS },
  { code: 95, name: 'Uncontained ECC error', bucket: 'RESET_GPU', action: 'reset_gpu', gpus: AMPERE_ON, drivers: ALL_DRIVERS },
  { code: 109, name: 'Context switch timeout', bucket: 'RESET_GPU', action: 'reset_gpu', gpus: AMPERE_ON, drivers: ALL_DRIVERS },
  { code: 119, name: 'GSP RPC timeout', bucket: 'RESET_GPU', action: 'reset_gpu', gpus: AMPERE_ON, drivers: ALL_DRIVERS },
  { code: 120, name: 'GSP error', bucket: 'RESET_GPU', action: 'reset_gpu', gpus: AMPERE_ON, drivers: ALL_DRIVERS },
  { code: 136, name: 'NVLink ALI training failed', bucket: 'RESET_GPU', action: 'reset_gpu', gpus: 'H100', drivers: ALL_DRIVERS },
  { code: 140, name: 'Unrecovered ECC error', bucket: 'RESET_GPU', action: 'reset_gpu', gpus: AMPERE_ON, drivers: ALL_DRIVERS },
  { code: 143, name: 'GPU initialization error', bucket: 'RESET_GPU', action: 'reset_gpu', gpus: AMPERE_ON, drivers: ALL_DRIVERS },
  { code: 144, name: 'NVLink SAW error', bucket: 'WORKFLOW_NVLINK5_ERR', action: 'reset_gpu', awaits154: true, gpus: 'B100, GB200', drivers: NVL5_DRIVERS },
  { code: 145, name: 'NVLink RLW error', bucket: 'WORKFLOW_NVLINK5_ERR', action: 'reset_gpu', awaits154: true, gpus: 'B100, GB200', drivers: NVL5_DRIVERS },
  { code: 146, name: 'NVLink TLW error', bucket: 'WORKFLOW_NVLINK5_ERR', action: 'reset_gpu', awaits154: true, gpus: 'B100, GB200', drivers: NVL5_DRIVERS },
  { code: 147, name: 'NVLink TREX error', bucket: 'WORKFLOW_NVLINK5_ERR', action: 'reset_gpu', awaits154: true, gpus: 'B100, GB200', drivers: NVL5_DRIVERS },
  { code: 148, name: 'NVLink NVLPW control error', bucket: 'WORKFLOW_NVLINK5_ERR', action: 'reset_gpu', awaits154: true, gpus: 'B100, GB200', drivers: NVL5_DRIVERS },
  { code: 149, name: 'NVLink NETIR error', bucket: 'WORKFLOW_NVLINK5_ERR', action: 'reset_gpu', awaits154: true, gpus: 'B100, GB200', drivers: NVL5_DRIVERS },
  { code: 150, name: 'NVLink MSE error', bucket: 'WORKFLOW_NVLINK5_ERR', action: 'reset_gpu', awaits154: true, gpus: 'B100, GB200', drivers: NVL5_DRIVERS },
  { code: 154, name: 'GPU recovery action changed', bucket: 'XID_154_EVAL', action: 'reset_gpu', gpus: AMPERE_ON, drivers: 'drivers that print it (the catalog states no first version); codes 5-7 only on newer NVML', note: 'the recovery action code in the message decides (RECOVERY_ACTIONS)' },
];

const BY_CODE = new Map(TRIAGE.map((r) => [r.code, r]));

export function triageRow(code: number): TriageRow | undefined {
  return BY_CODE.get(code);
}

/** NVML's nvmlDeviceGpuRecoveryAction_t, as Xid 154 prints it → our class (`undefined`: back to none). */
export const RECOVERY_ACTIONS: Record<number, { name: string; action: ActionClass | undefined }> = {
  0: { name: 'None', action: undefined },
  1: { name: 'GPU Reset Required', action: 'reset_gpu' },
  2: { name: 'Node Reboot Required', action: 'reboot_node' },
  3: { name: 'Drain P2P', action: 'drain_reset' },
  4: { name: 'Drain and Reset', action: 'drain_reset' },
  5: { name: 'Recover IMEX Domain', action: 'reset_gpu' },
  6: { name: 'Bus Reset', action: 'reset_gpu' },
  7: { name: 'System Reboot', action: 'reboot_node' },
};

export function worse(a: ActionClass, b: ActionClass): ActionClass {
  return ACTION_ORDER.indexOf(a) >= ACTION_ORDER.indexOf(b) ? a : b;
}
