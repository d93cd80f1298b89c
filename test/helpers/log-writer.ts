/**
 * A process that logs through the gateway's stdout logger (JSON, batched), for
 * test/log-batching.test.ts: `log-writer.ts <lines> exit|idle`. It writes `lines` lines of
 * varied length with non-ASCII text, then exits at once (`exit`) or says `written` on stderr and
 * waits to be killed (`idle`).
 */
import { createLogger } from '../../src/observability/logger.js';

const lines = Number(process.argv[2]);
const then = process.argv[3];
const log = createLogger('info', undefined, 'json');
for (let seq = 0; seq < lines; seq++) {
  log.info({ seq, model: 'модель-é-模型-🚀', pad: 'x'.repeat(seq % 700) }, 'request ended');
}
if (then === 'exit') process.exit(0);
process.stderr.write('written\n');
setTimeout(() => {}, 60_000);
