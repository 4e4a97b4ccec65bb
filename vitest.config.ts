import { defineConfig } from 'vitest/config';

export default defineConfig({
  test: {
    include: ['**/*.test.ts'],
    exclude: ['node_modules/**', 'dist/**'],
    testTimeout: 60_000,
    hookTimeout: 120_000,
    // chDB allows one data directory per process: keep test files in separate forks.
    pool: 'forks',
    // A real Kafka broker for the tests/kafka*.int.test.ts suites (started only when they run).
    globalSetup: ['tests/setup/kafka.ts'],
  },
});
