/**
 * Kubernetes through its REST API, as `kubectl cordon` does it plus what says why: the node gets
 * `spec.unschedulable: true`, a `NoSchedule` taint `rankwatch.io/<finding type>` and annotations
 * with the finding id and reason; uncordon removes exactly those. Each change is a JSON merge
 * patch carrying the node's resourceVersion, so a concurrent edit is a 409 (retried) rather than
 * lost, and the taint list sent keeps every taint rankwatch did not put there. The node list
 * (paged) tells which nodes rankwatch has out. Plain HTTPS with a bearer token (the in-cluster
 * service account by default); no client library needed for four calls.
 */
import { readFileSync } from 'node:fs';
import { request as httpRequest } from 'node:http';
import { request as httpsRequest } from 'node:https';
import { RankwatchError } from '../../core/errors.js';
import {
  type CordonDriver,
  type CordonRequest,
  type ListedNode,
  type NodeOut,
  REASON_PREFIX,
} from './driver.js';

export const ANNOTATION_FINDING = 'rankwatch.io/finding-id';
export const ANNOTATION_REASON = 'rankwatch.io/reason';
export const TAINT_PREFIX = 'rankwatch.io/';
export const MERGE_PATCH = 'application/merge-patch+json';

export interface KubernetesConfig {
  /** API server, e.g. https://10.0.0.1:443 (in a pod: https://$KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT). */
  apiServer: string;
  token?: string;
  /** PEM CA bundle of the API server. */
  ca?: string;
  timeoutMs: number;
}

interface Taint {
  key: string;
  value?: string;
  effect: string;
  timeAdded?: string;
}

interface KNode {
  metadata: { name: string; resourceVersion?: string; annotations?: Record<string, string> };
  spec?: { unschedulable?: boolean; taints?: Taint[] };
}

/** Out when unschedulable; by rankwatch when it carries rankwatch's finding annotation. */
function nodeOut(n: KNode): NodeOut {
  const reason = n.metadata.annotations?.[ANNOTATION_REASON];
  const out = n.spec?.unschedulable === true;
  return { out, reason, byRankwatch: out && n.metadata.annotations?.[ANNOTATION_FINDING] !== undefined };
}

/** The in-cluster service account, when rankwatch runs in a pod. */
export function inClusterConfig(): KubernetesConfig {
  const dir = '/var/run/secrets/kubernetes.io/serviceaccount';
  const host = process.env.KUBERNETES_SERVICE_HOST;
  const port = process.env.KUBERNETES_SERVICE_PORT ?? '443';
  if (!host)
    throw new RankwatchError(
      'RANKWATCH_ERR_CONFIG',
      'not in a pod (no KUBERNETES_SERVICE_HOST): give the API server URL',
    );
  return {
    apiServer: `https://${host.includes(':') ? `[${host}]` : host}:${port}`,
    token: readFileSync(`${dir}/token`, 'utf8').trim(),
    ca: readFileSync(`${dir}/ca.crt`, 'utf8'),
    timeoutMs: 10_000,
  };
}

export class KubernetesDriver implements CordonDriver {
  readonly type = 'kubernetes';
  private readonly cfg: KubernetesConfig;

  constructor(cfg: Partial<KubernetesConfig> & { apiServer: string }) {
    this.cfg = { timeoutMs: 10_000, ...cfg };
  }

  async cordon(r: CordonRequest): Promise<void> {
    const n = await this.get(r.host);
    const key = `${TAINT_PREFIX}${r.findingType}`.slice(0, 253);
    const taints = (n.spec?.taints ?? []).filter((t) => t.key !== key);
    taints.push({ key, value: 'true', effect: 'NoSchedule' });
    await this.patch(r.host, {
      metadata: {
        resourceVersion: n.metadata.resourceVersion,
        annotations: {
          [ANNOTATION_FINDING]: r.findingId,
          [ANNOTATION_REASON]: `${REASON_PREFIX} ${r.reason}`,
        },
      },
      spec: { unschedulable: true, taints },
    });
  }

  async uncordon(host: string): Promise<void> {
    const n = await this.get(host);
    const taints = (n.spec?.taints ?? []).filter((t) => !t.key.startsWith(TAINT_PREFIX));
    await this.patch(host, {
      metadata: {
        resourceVersion: n.metadata.resourceVersion,
        annotations: { [ANNOTATION_FINDING]: null, [ANNOTATION_REASON]: null },
      },
      spec: { unschedulable: null, taints: taints.length ? taints : null },
    });
  }

  async state(host: string): Promise<NodeOut> {
    return nodeOut(await this.get(host));
  }

  /** GET /api/v1/nodes in pages of 500 (`limit` and `continue`, as kubectl pages a big list). */
  async nodes(): Promise<ListedNode[]> {
    const out: ListedNode[] = [];
    let cont: string | undefined;
    do {
      const q = new URLSearchParams({ limit: '500', ...(cont ? { continue: cont } : {}) });
      const page = (await this.call('GET', undefined, undefined, `?${q}`)) as {
        items?: KNode[];
        metadata?: { continue?: string };
      };
      for (const n of page.items ?? []) out.push({ host: n.metadata.name, ...nodeOut(n) });
      cont = page.metadata?.continue || undefined;
    } while (cont);
    return out;
  }

  private get(host: string): Promise<KNode> {
    return this.call('GET', host) as Promise<KNode>;
  }

  private patch(host: string, body: unknown): Promise<unknown> {
    return this.call('PATCH', host, body);
  }

  private call(
    method: 'GET' | 'PATCH',
    host: string | undefined,
    body?: unknown,
    query = '',
  ): Promise<unknown> {
    const path = host === undefined ? '/api/v1/nodes' : `/api/v1/nodes/${encodeURIComponent(host)}`;
    const url = new URL(`${path}${query}`, this.cfg.apiServer);
    const payload = body === undefined ? undefined : JSON.stringify(body);
    const headers: Record<string, string> = { accept: 'application/json' };
    if (this.cfg.token) headers.authorization = `Bearer ${this.cfg.token}`;
    if (payload) headers['content-type'] = MERGE_PATCH;
    const req = url.protocol === 'https:' ? httpsRequest : httpRequest;
    return new Promise((resolve, reject) => {
      const r = req(url, { method, headers, ca: this.cfg.ca, timeout: this.cfg.timeoutMs }, (res) => {
        let text = '';
        res.setEncoding('utf8');
        res.on('data', (c) => (text += c));
        res.on('end', () => {
          const status = res.statusCode ?? 0;
          if (status >= 200 && status < 300) return resolve(text ? JSON.parse(text) : {});
          // 409 (someone changed the node), 429 and 5xx: try again; 401/403/404: fix the setup.
          const retriable = status === 409 || status === 429 || status >= 500;
          reject(
            new RankwatchError(
              retriable ? 'RANKWATCH_ERR_CORDON_FAILED' : 'RANKWATCH_ERR_CORDON_REFUSED',
              `Kubernetes ${method} ${host === undefined ? 'nodes' : `node ${host}`} answered ${status}: ${text.slice(0, 200)}`,
            ),
          );
        });
      });
      r.on('timeout', () => r.destroy(new Error(`no answer in ${this.cfg.timeoutMs} ms`)));
      r.on('error', (err) =>
        reject(
          new RankwatchError(
            'RANKWATCH_ERR_CORDON_FAILED',
            `Kubernetes API ${url.origin} unreachable: ${err.message}`,
            { cause: err },
          ),
        ),
      );
      r.end(payload);
    });
  }
}
