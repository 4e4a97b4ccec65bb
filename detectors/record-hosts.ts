/**
 * Hosts named once per shard record (format 5): a `steps` or `edges` record lists its hosts in
 * `hosts`, and its rows name one by index. While a record is filled its index of them is kept
 * beside it, not in it (it is not sent), and goes with the record.
 */
const indexes = new WeakMap<{ hosts: string[] }, Map<string, number>>();

/** `host`'s index in `r.hosts`, added if it is not there. */
export function hostIndex(r: { hosts: string[] }, host: string): number {
  let index = indexes.get(r);
  if (!index) {
    index = new Map();
    indexes.set(r, index);
  }
  let i = index.get(host);
  if (i === undefined) {
    i = r.hosts.length;
    r.hosts.push(host);
    index.set(host, i);
  }
  return i;
}
