/**
 * The services the suite talks to, as `npm test` (scripts/test.ts) provided them: this machine's
 * defaults unless it started its own for the run and said so in the environment.
 */
export const REDIS_URL = process.env.SLUICE_TEST_REDIS_URL ?? 'redis://127.0.0.1:6379';
export const CHROMIUM_PATH = process.env.SLUICE_TEST_CHROMIUM ?? '/usr/bin/chromium';
export { POSTGRES_URL } from './backends.js';
