/**
 * One interface for taking a node out of scheduling and putting it back, whatever the scheduler.
 * A driver marks what it does with rankwatch's prefix, so `state()` can tell rankwatch's cordons
 * from a person's: a node a human drained is never resumed by rankwatch.
 */
export const REASON_PREFIX = 'rankwatch:';

export interface CordonRequest {
  host: string;
  findingId: string;
  findingType: string;
  /** One line a person reads in `sinfo -R` or `kubectl describe node`. */
  reason: string;
}

export interface NodeOut {
  /** Out of scheduling (drained, draining, cordoned). */
  out: boolean;
  /** The scheduler's reason text, when it has one. */
  reason?: string;
  /** Out by rankwatch's hand (its prefix, annotation or taint). */
  byRankwatch: boolean;
}

/** One node of the scheduler's own list. */
export interface ListedNode extends NodeOut {
  host: string;
}

export interface CordonDriver {
  readonly type: string;
  cordon(r: CordonRequest): Promise<void>;
  uncordon(host: string): Promise<void>;
  state(host: string): Promise<NodeOut>;
  /**
   * Every node the scheduler knows, with whether it is out and by whose hand: the truth the
   * repair loop reconciles its stored state with at start, and the fleet its budget's share is of.
   */
  nodes(): Promise<ListedNode[]>;
}
