import { defineConfig } from 'vitest/config';

export default defineConfig({
  test: {
    include: ['**/*.test.ts'],
    exclude: ['node_modules/**', 'dist/**'],
    testTimeout: 60_000,
    hookTimeout: 120_000,
    // chDB allows one data directory per process: keep test files in separate forks.
    pool: 'forks',
    // Two files at a time: most integration tests wait on a broker, a child process or a socket,
    // so two overlap well on two cores (and stay green with a CPU hog beside them).
    maxWorkers: 2,
    // A real Kafka broker for the tests/kafka*.int.test.ts suites (started only when they run).
    globalSetup: ['tests/setup/kafka.ts'],
  },
});
