import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { runInNewContext } from 'node:vm';
import { afterEach, describe, expect, it } from 'vitest';
import { linkClientScript } from '../src/dashboard/client-script.js';
import { DASHBOARD_HTML } from '../src/dashboard/page.js';

const dirs: string[] = [];

/** A folder of modules as tsc writes them, by file name. */
function modules(files: Record<string, string>): URL {
  const dir = mkdtempSync(join(tmpdir(), 'sluice-dashboard-script-'));
  dirs.push(dir);
  for (const [name, code] of Object.entries(files)) writeFileSync(join(dir, name), code);
  return pathToFileURL(`${dir}/`);
}

afterEach(() => {
  for (const dir of dirs.splice(0)) rmSync(dir, { recursive: true, force: true });
});

describe('the dashboard script', () => {
  it('links modules into one script: each once, after what it imports, with its imports bound', () => {
    const script = linkClientScript(
      modules({
        'main.js': [
          "import { twice as double, seen } from './util.js';",
          "import { label } from './text-format.js';",
          "import {} from './types.js';",
          "log.push('main', double(21), label(), seen.length);",
        ].join('\n'),
        'util.js': [
          'export const seen = [];',
          "log.push('util');",
          'export function twice(n) {',
          '    return 2 * n;',
          '}',
        ].join('\n'),
        'text-format.js': [
          "import { twice } from './util.js';",
          "log.push('text');",
          "export const label = () => 'x' + twice(2);",
        ].join('\n'),
        'types.js': 'export {};',
      }),
    );
    expect(script).not.toMatch(/^(import|export)\b/m);
    const log: unknown[] = [];
    runInNewContext(script, { log });
    expect(log).toEqual(['util', 'text', 'main', 42, 'x4', 0]);
  });

  it('throws on what it cannot link', () => {
    const link = (files: Record<string, string>) => () => linkClientScript(modules(files));
    expect(
      link({
        'main.js': "import { a } from './a.js';",
        'a.js': "import { b } from './main.js';\nexport const a = 1;",
      }),
    ).toThrow(/import cycle main\.js -> a\.js -> main\.js/);
    expect(link({ 'main.js': "import { a } from './a.js';", 'a.js': 'export const b = 1;' })).toThrow(
      /a\.js exports no a/,
    );
    expect(link({ 'main.js': 'export default 1;' })).toThrow(/cannot link "export default 1;"/);
    expect(link({ 'main.js': "import { a } from '../a.js';" })).toThrow(/cannot link "import/);
    expect(link({ 'main.js': 'export let a = 1;' })).toThrow(/cannot link "export let/);
    expect(link({ 'main.js': "const s = '</script>';" })).toThrow(/<\/script/);
  });

  it('is inlined in the page as one classic script, without a module statement', () => {
    const scripts = [...DASHBOARD_HTML.matchAll(/<script>([\s\S]*?)<\/script>/g)];
    expect(scripts).toHaveLength(1);
    expect(scripts[0]![1]).not.toMatch(/^\s*(import|export)\b/m);
    expect(scripts[0]![1]).toContain("'use strict'");
  });
});
