/**
 * vitest global setup: bundles the dashboard's browser script (src/dashboard/client/, with
 * esbuild as `npm run build` does) into .tmp/dashboard-client.js, which src/dashboard/page.ts
 * inlines when the gateway runs from its sources, unless the bundle is newer than every source.
 * Type errors are not its business (`npm run typecheck` reports them).
 */
import { existsSync, readdirSync, statSync } from 'node:fs';
import { buildSync } from 'esbuild';

const SOURCES = new URL('../../src/dashboard/client/', import.meta.url);
const BUNDLE = new URL('../../.tmp/dashboard-client.js', import.meta.url);

function upToDate(): boolean {
  if (!existsSync(BUNDLE)) return false;
  const newest = Math.max(...readdirSync(SOURCES).map((f) => statSync(new URL(f, SOURCES)).mtimeMs));
  return statSync(BUNDLE).mtimeMs >= newest;
}

export default function setup(): void {
  if (upToDate()) return;
  buildSync({
    entryPoints: [new URL('main.ts', SOURCES).pathname],
    bundle: true,
    format: 'iife',
    target: 'es2022',
    banner: { js: '"use strict";' },
    logLevel: 'warning',
    outfile: BUNDLE.pathname,
  });
}
