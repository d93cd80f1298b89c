import { spawn } from 'node:child_process';
import { createRequire } from 'node:module';

const KEEPER_READY_TIMEOUT_MS = 5_000;

/**
 * Closes a WAL database whose files turned unwritable without a SIGBUS. The last connection to
 * close checkpoints, writing through its mapping of `-shm`, which faults on an unwritable file.
 * A connection is not the last while another process holds a read lock, so a short-lived
 * "keeper" process opens the database read-only (it maps `-shm` read-only: it cannot open it
 * for writing) and holds a read transaction while `close` runs; then it is killed. Resolves
 * false when no keeper could be started: the caller must then leave the database open.
 */
export async function closeBehindKeeper(path: string, close: () => Promise<void>): Promise<boolean> {
  const driver = createRequire(import.meta.url).resolve('better-sqlite3');
  const code = `
    const Database = require(process.argv[1]);
    const db = new Database(process.argv[2], { readonly: true, fileMustExist: true });
    db.exec('BEGIN');
    db.prepare('SELECT count(*) FROM sqlite_schema').get();
    process.stdout.write('ready\\n');
    setInterval(() => {}, 60000);`;
  const keeper = spawn(process.execPath, ['-e', code, driver, path], { stdio: ['ignore', 'pipe', 'ignore'] });
  try {
    const ready = await new Promise<boolean>((resolve) => {
      const timer = setTimeout(() => resolve(false), KEEPER_READY_TIMEOUT_MS);
      keeper.stdout!.on('data', (chunk: Buffer) => {
        if (chunk.toString().includes('ready')) {
          clearTimeout(timer);
          resolve(true);
        }
      });
      keeper.once('error', () => resolve(false));
      keeper.once('exit', () => resolve(false));
    });
    if (!ready) return false;
    await close();
    return true;
  } finally {
    keeper.kill('SIGKILL');
  }
}
