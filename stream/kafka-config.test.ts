/**
 * The Kafka client's own log during a broker outage is rate-limited. The lines are kafkajs's, as
 * users posted them from real outages: tulios/kafkajs#1557 (connection timeouts, then the consumer
 * crash), tulios/kafkajs#267 (all brokers down), tomasAlabes/graphql-kafkajs-subscriptions#13
 * (ECONNREFUSED on a local broker).
 */
import { describe, expect, it } from 'vitest';
import { limitKafkaLog } from './kafka-config.js';

const OUTAGE = [
  '[Connection] Connection error: connect ECONNREFUSED 127.0.0.1:9092',
  '[BrokerPool] Failed to connect to seed broker, trying another broker from the list: Connection error: connect ECONNREFUSED 127.0.0.1:9092',
  '[Connection] Connection timeout',
  '[BrokerPool] Failed to connect to seed broker, trying another broker from the list: Connection timeout',
  '[Connection] Connection error: connect ETIMEDOUT 192.168.1.172:9100',
  '[Consumer] Crash: KafkaJSNumberOfRetriesExceeded: Connection timeout',
];

describe('limitKafkaLog', () => {
  it('turns the ~565 lines of a 50 s outage into a handful, and says how many it held back', () => {
    let t = 0;
    const out: string[] = [];
    const log = limitKafkaLog(
      (level, m) => out.push(`${level} ${m}`),
      {},
      () => t,
    );
    // 565 lines over 50 s, the kinds cycling, with changing ports and addresses as in the real ones.
    for (let i = 0; i < 565; i++) {
      t = Math.round((i * 50_000) / 565);
      log('error', `kafkajs: ${OUTAGE[i % OUTAGE.length].replace('9092', String(9092 + (i % 3)))}`);
    }
    expect(out.length).toBeLessThanOrEqual(5);
    expect(out[0]).toBe(`error kafkajs: ${OUTAGE[0]}`);
    // The next window opens with the count of what was held back, then the new line.
    t = 61_000;
    log('warn', 'kafkajs: [Connection] Connection error: connect ECONNREFUSED 127.0.0.1:9092');
    expect(out.at(-2)).toBe(
      `warn kafkajs: ${565 - (out.length - 2)} more line(s) like the above held back in 60 s`,
    );
    expect(out.at(-1)).toMatch(/ECONNREFUSED/);
  });
});
