import { readFileSync } from 'node:fs';

/**
 * The dashboard page's one inline script, linked from the ES modules tsc wrote for the browser
 * (src/dashboard/client/). The page's Content-Security-Policy allows inline script only, where a
 * module cannot import another by URL, and no bundler is at hand: the modules are linked here.
 * Each module's code runs once in a function of its own, after the modules it imports, and its
 * named imports are read from what those returned (their exports); the entry module runs last.
 * The result is a classic script, in strict mode as modules are.
 *
 * Only what tsc writes for those sources is understood: `import { a, b as c } from './x.js'` of a
 * module of the same folder, `export` of a function, class or const, and the `export {};` of a
 * module of types only. Anything else (a default export, a re-export, `export let`, an import
 * cycle, a name its module does not export) throws, so that what the linker would get wrong
 * fails when the gateway loads this page, which every test does.
 */

const IMPORT = /^import \{([^}]*)\} from '\.\/([\w-]+)\.js';$/gm;
const EXPORT = /^export ((?:async )?function|class|const) ([\w$]+)/gm;
const EMPTY_EXPORT = /^export \{\};$/gm;
const LEFT_OVER = /^(import|export)\b.*/m;
const IDENTIFIER = /^[A-Za-z_$][\w$]*$/;
/** The prefix of the variables holding each module's exports; never in a module's own code. */
const PREFIX = '$module$';

interface Linked {
  code: string;
  exports: Set<string>;
}

const variableOf = (module: string) => PREFIX + module.replaceAll('-', '$');

/** Links `entry` (a file of `dir`) and what it imports into one script. */
export function linkClientScript(dir: URL, entry = 'main.js'): string {
  const linked = new Map<string, Linked>();
  const order: string[] = [];
  const visit = (file: string, path: readonly string[]): Linked => {
    const done = linked.get(file);
    if (done) return done;
    if (path.includes(file))
      throw new Error(`dashboard script: import cycle ${[...path, file].join(' -> ')}`);
    const source = readFileSync(new URL(file, dir), 'utf8');
    if (source.includes(PREFIX)) throw new Error(`dashboard script: ${file} uses the reserved ${PREFIX}`);
    const code = source
      .replace(IMPORT, (_statement, list: string, module: string) => {
        const from = visit(`${module}.js`, [...path, file]);
        const bindings = list
          .split(',')
          .map((s) => s.trim())
          .filter((s) => s !== '')
          .map((specifier) => {
            const [name = '', local = name, ...rest] = specifier.split(/\s+as\s+/);
            if (rest.length > 0 || !IDENTIFIER.test(name) || !IDENTIFIER.test(local))
              throw new Error(`dashboard script: ${file}: cannot link the import of "${specifier}"`);
            if (!from.exports.has(name)) throw new Error(`dashboard script: ${module}.js exports no ${name}`);
            return name === local ? name : `${name}: ${local}`;
          });
        return bindings.length > 0 ? `const { ${bindings.join(', ')} } = ${variableOf(module)};` : '';
      })
      .replace(EMPTY_EXPORT, '');
    const exports = new Set<string>();
    const body = code.replace(EXPORT, (_statement, kind: string, name: string) => {
      exports.add(name);
      return `${kind} ${name}`;
    });
    const leftOver = LEFT_OVER.exec(body);
    if (leftOver) throw new Error(`dashboard script: ${file}: cannot link "${leftOver[0]}"`);
    const module = { code: body.trim(), exports };
    linked.set(file, module);
    order.push(file);
    return module;
  };
  visit(entry, []);

  const parts = order.map((file) => {
    const { code, exports } = linked.get(file)!;
    if (file === entry) return `(() => {\n${code}\n})();`;
    const returned = exports.size > 0 ? `\nreturn { ${[...exports].join(', ')} };` : '';
    return `const ${variableOf(file.slice(0, -'.js'.length))} = (() => {\n${code}${returned}\n})();`;
  });
  const script = `(() => {\n'use strict';\n${parts.join('\n')}\n})();\n`;
  // The page inlines it: a closing tag in it would end the script there.
  if (/<\/script/i.test(script)) throw new Error('dashboard script: contains "</script"');
  return script;
}
