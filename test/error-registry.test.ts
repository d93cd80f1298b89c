import { readdirSync, readFileSync } from 'node:fs';
import { basename, join, relative } from 'node:path';
import ts from 'typescript';
import { describe, expect, it } from 'vitest';
import {
  CODES_WITH_TWO_STATUSES,
  REGISTRY_PATH,
  RELAYED,
  RESPONSE_CODES,
  ROOT,
  readErrorClasses,
  renderRegistry,
  SECTIONS,
} from '../scripts/error-registry.js';
import * as errors from '../src/errors/index.js';

/** Read once: the TypeScript checker over src/errors/ takes a few seconds. */
const classes = readErrorClasses();
const concrete = classes.filter((c) => !c.abstract);

function sourceFiles(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((entry) => {
    const path = join(dir, entry.name);
    if (entry.isDirectory()) return sourceFiles(path);
    return entry.name.endsWith('.ts') ? [path] : [];
  });
}

describe('the registry of error codes, docs/ERRORS.md', () => {
  it('is what scripts/error-registry.ts makes of the classes', () => {
    const stale = 'docs/ERRORS.md is not what the classes say: run npx tsx scripts/error-registry.ts --write';
    expect(readFileSync(REGISTRY_PATH, 'utf8'), stale).toBe(renderRegistry(classes));
  });

  it('names every error class src/errors/index.ts exports, each in the section of its file', () => {
    const exported = Object.entries(errors)
      .filter(([, value]) => typeof value === 'function' && value.prototype instanceof errors.SluiceError)
      .map(([name]) => name);
    expect(classes.map((c) => c.name).sort()).toEqual(exported.sort());
    const registry = readFileSync(REGISTRY_PATH, 'utf8');
    for (const c of classes) {
      expect(Object.keys(SECTIONS), c.file).toContain(basename(c.file));
      expect(registry, c.name).toContain(`\`${c.name}\``);
    }
  });

  it('says when each error happens: every class has a doc comment', () => {
    for (const c of classes) expect(c.when, c.name).toMatch(/^\S.{10,}\.$/);
  });

  it('lists response codes that the code does use, where it says', () => {
    // A use is an error object's `code: '<code>'` in the code itself (a comment or a message that
    // names it is not), in the file the registry names for it.
    const uses = new Map<string, Set<string>>();
    for (const file of sourceFiles(join(ROOT, 'src'))) {
      const source = ts.createSourceFile(file, readFileSync(file, 'utf8'), ts.ScriptTarget.Latest);
      const visit = (node: ts.Node): void => {
        if (
          ts.isPropertyAssignment(node) &&
          node.name.getText(source) === 'code' &&
          ts.isStringLiteralLike(node.initializer)
        ) {
          const files = uses.get(node.initializer.text) ?? new Set();
          files.add(relative(ROOT, file));
          uses.set(node.initializer.text, files);
        }
        ts.forEachChild(node, visit);
      };
      visit(source);
    }
    for (const [code, when] of Object.entries(RESPONSE_CODES)) {
      const named = /\((src\/[^)]+\.ts)\)/.exec(when)?.[1];
      expect(named, `${code}: the registry names the file that sets it`).toBeDefined();
      expect([...(uses.get(code) ?? [])], code).toContain(named);
    }
  });
});

describe('every error class', () => {
  it('fixes its code, status, OpenAI type and retryable as literal types; only the listed relays do not', () => {
    for (const c of concrete) {
      const relayed = RELAYED[c.name] ?? {};
      const unfixed = {
        code: c.codes === null,
        status: c.status === null,
        type: c.type === null,
        retryable: c.retryable === null,
      };
      expect({ class: c.name, ...unfixed }).toEqual({
        class: c.name,
        code: 'code' in relayed,
        status: 'status' in relayed,
        type: 'type' in relayed,
        retryable: 'retryable' in relayed,
      });
    }
    for (const name of Object.keys(RELAYED)) expect(concrete.map((c) => c.name)).toContain(name);
  });

  it('takes no status in its constructor', () => {
    for (const c of classes) {
      expect(
        c.constructorParameters.filter((p) => /^(status|statusCode|httpStatus)$/i.test(p)),
        c.name,
      ).toEqual([]);
    }
  });

  it('shares its code only with classes of the same status, type and retryable', () => {
    const byCode = new Map<string, { status: Set<number | null>; rest: Set<string> }>();
    for (const c of concrete) {
      for (const code of c.codes ?? []) {
        const seen = byCode.get(code) ?? { status: new Set(), rest: new Set() };
        seen.status.add(c.status);
        seen.rest.add(`${c.type} ${c.retryable}`);
        byCode.set(code, seen);
      }
    }
    for (const [code, seen] of byCode) {
      expect([...seen.rest], code).toHaveLength(1);
      expect(seen.status.size, code).toBe(code in CODES_WITH_TWO_STATUSES ? 2 : 1);
    }
    for (const code of Object.keys(CODES_WITH_TWO_STATUSES)) expect(byCode.has(code), code).toBe(true);
  });

  it('lives in src/errors/: no class elsewhere in src/ extends one', () => {
    const names = new Set(classes.map((c) => c.name).concat('SluiceError'));
    const outside: string[] = [];
    for (const file of sourceFiles(join(ROOT, 'src'))) {
      const where = relative(ROOT, file);
      if (where.startsWith('src/errors/')) continue;
      const source = ts.createSourceFile(file, readFileSync(file, 'utf8'), ts.ScriptTarget.Latest);
      const visit = (node: ts.Node): void => {
        if (ts.isClassLike(node)) {
          for (const clause of node.heritageClauses ?? []) {
            for (const type of clause.types) {
              const base = type.expression.getText(source).split('.').at(-1)!;
              if (names.has(base))
                outside.push(`${where}: ${node.name?.text ?? '(anonymous)'} extends ${base}`);
            }
          }
        }
        ts.forEachChild(node, visit);
      };
      visit(source);
    }
    expect(outside).toEqual([]);
    for (const c of classes) expect(c.file, c.name).toMatch(/^src\/errors\//);
  });
});
