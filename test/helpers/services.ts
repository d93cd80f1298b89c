/**
 * The services the suite talks to, as `npm test` (scripts/test.ts) provided them: this machine's
 * defaults unless it started its own for the run and said so in the environment.
 */
export { POSTGRES_URL, REDIS_URL } from './backends.js';
export const CHROMIUM_PATH = process.env.SLUICE_TEST_CHROMIUM ?? '/usr/bin/chromium';
