/**
 * vitest global setup: compiles the dashboard's browser script (`tsc -p src/dashboard/client`,
 * into .tmp/dashboard-client/) for src/dashboard/page.ts to inline when the gateway runs from its
 * sources, unless every compiled module is newer than every file of src/dashboard/client/.
 * Type errors do not stop the tests (as elsewhere, `npm run typecheck` reports them).
 */
import { execFileSync } from 'node:child_process';
import { existsSync, readdirSync, statSync } from 'node:fs';
import { createRequire } from 'node:module';

const SOURCES = new URL('../../src/dashboard/client/', import.meta.url);
const COMPILED = new URL('../../.tmp/dashboard-client/dashboard/client/', import.meta.url);

function upToDate(): boolean {
  const files = readdirSync(SOURCES);
  const newestSource = Math.max(...files.map((f) => statSync(new URL(f, SOURCES)).mtimeMs));
  return files
    .filter((f) => f.endsWith('.ts'))
    .map((f) => new URL(f.replace(/\.ts$/, '.js'), COMPILED))
    .every((js) => existsSync(js) && statSync(js).mtimeMs >= newestSource);
}

export default function setup(): void {
  if (upToDate()) return;
  const tsc = createRequire(import.meta.url).resolve('typescript/bin/tsc');
  try {
    execFileSync(process.execPath, [tsc, '-p', 'src/dashboard/client'], { encoding: 'utf8', stdio: 'pipe' });
  } catch (err) {
    const { stdout, stderr } = err as { stdout?: string; stderr?: string };
    console.warn(`tsc -p src/dashboard/client:\n${stdout ?? ''}${stderr ?? ''}`);
  }
}
