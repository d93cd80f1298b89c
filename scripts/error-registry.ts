/**
 * The registry of sluice's error codes (docs/ERRORS.md), read from the error classes themselves:
 * the TypeScript checker reads every class `src/errors/index.ts` exports, whose `code`, `status`,
 * `type` and `retryable` are literal types, and the first sentence of its doc comment.
 *
 *   npx tsx scripts/error-registry.ts           prints the registry
 *   npx tsx scripts/error-registry.ts --write   writes docs/ERRORS.md
 *
 * test/error-registry.test.ts fails when docs/ERRORS.md is not what this prints.
 */
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import { join, relative } from 'node:path';
import { fileURLToPath } from 'node:url';
import ts from 'typescript';
import { anthropicErrorType, anthropicStatusOf } from '../src/messages/errors.js';

export const ROOT = fileURLToPath(new URL('..', import.meta.url));
export const REGISTRY_PATH = join(ROOT, 'docs', 'ERRORS.md');

/** What one error class fixes; null where the class relays what an engine (or another error) said. */
export interface ErrorClassFacts {
  name: string;
  /** Relative to the repository: `src/errors/request-errors.ts`. */
  file: string;
  abstract: boolean;
  codes: string[] | null;
  status: number | null;
  type: string | null;
  retryable: boolean | null;
  /** The first sentence of the class's doc comment. */
  when: string;
  constructorParameters: string[];
}

type Fact = 'code' | 'status' | 'type' | 'retryable';

/** The only classes that relay a fact instead of fixing it, and what the registry says of it. */
export const RELAYED: Readonly<Record<string, Partial<Record<Fact, string>>>> = {
  UpstreamHttpError: {
    status: "the engine's 4xx, 429 or 503; its other 5xx → 502",
    type: 'by status',
    retryable: '429, 5xx',
  },
  UpstreamErrorFrame: { retryable: '429/5xx-like engine codes' },
  McpTurnFailed: { code: '(the code of the error that stopped the turn)' },
};

/** Codes released with two statuses, kept as clients know them. Any other code has one status. */
export const CODES_WITH_TWO_STATUSES: Readonly<Record<string, string>> = {
  invalid_url: 'a malformed percent-encoding is a 400, an overlong path parameter a 414',
};

/** The sections of the registry, one per file of src/errors/, in this order. */
export const SECTIONS: Readonly<Record<string, string>> = {
  'request-errors.ts': 'Request validation',
  'request-content-errors.ts': 'Request content',
  'batch-errors.ts': 'Embeddings, rerank, score and tokenizer requests',
  'not-found-errors.ts': 'Not found',
  'conflict-errors.ts': 'Conflicts',
  'auth-errors.ts': 'Authentication and limits',
  'http-errors.ts': "Admission and the gateway's state",
  'upstream-errors.ts': 'Upstream answers (before the first byte)',
  'upstream-limit-errors.ts': 'Upstream bounds',
  'stream-errors.ts': 'Streams (after the first byte, or before it and retried)',
  'storage-errors.ts': 'Storage',
  'mcp-errors.ts': 'MCP tools',
  'file-errors.ts': 'Files',
  'websocket-errors.ts': 'WebSocket mode',
  'utility-errors.ts': 'Utility calls (admin fan-out to engines)',
};

/** Codes of a failed response object that no error class carries (they are never an HTTP answer). */
export const RESPONSE_CODES: Readonly<Record<string, string>> = {
  store_write_failed:
    'the response could not be stored; the terminal event says so (src/responses/durable-finish.ts)',
  response_cancelled: 'a background response was cancelled (src/responses/terminal-draft.ts)',
};

export function readErrorClasses(): ErrorClassFacts[] {
  const config = ts.readConfigFile(join(ROOT, 'tsconfig.json'), ts.sys.readFile);
  const { options } = ts.parseJsonConfigFileContent(config.config, ts.sys, ROOT);
  const index = join(ROOT, 'src', 'errors', 'index.ts');
  const program = ts.createProgram([index], { ...options, noEmit: true });
  const checker = program.getTypeChecker();
  const module = checker.getSymbolAtLocation(program.getSourceFile(index)!)!;
  const classes: ErrorClassFacts[] = [];
  for (const exported of checker.getExportsOfModule(module)) {
    const symbol = exported.flags & ts.SymbolFlags.Alias ? checker.getAliasedSymbol(exported) : exported;
    const declaration = symbol.valueDeclaration;
    if (!(symbol.flags & ts.SymbolFlags.Class) || !declaration || !ts.isClassDeclaration(declaration))
      continue;
    const instance = checker.getDeclaredTypeOfSymbol(symbol) as ts.InterfaceType;
    if (!baseNames(checker, instance).includes('SluiceError')) continue;
    const fact = (name: Fact) => {
      const property = checker.getPropertyOfType(instance, name);
      return property ? checker.getTypeOfSymbol(property) : undefined;
    };
    const signatures = checker.getTypeOfSymbol(symbol).getConstructSignatures();
    const types = stringLiterals(fact('type'));
    classes.push({
      name: symbol.name,
      file: relative(ROOT, declaration.getSourceFile().fileName),
      abstract: (ts.getCombinedModifierFlags(declaration) & ts.ModifierFlags.Abstract) !== 0,
      codes: stringLiterals(fact('code')),
      status: numberLiteral(fact('status')),
      type: types?.length === 1 ? types[0]! : null,
      retryable: booleanLiteral(checker, fact('retryable')),
      when: firstSentence(ts.displayPartsToString(symbol.getDocumentationComment(checker))),
      constructorParameters: signatures.flatMap((s) => s.getParameters().map((p) => p.name)),
    });
  }
  const position = (c: ErrorClassFacts) => Object.keys(SECTIONS).indexOf(c.file.split('/').at(-1)!);
  return classes.sort((a, b) => position(a) - position(b));
}

function baseNames(checker: ts.TypeChecker, type: ts.InterfaceType): string[] {
  const base = checker.getBaseTypes(type)[0];
  if (!base?.symbol) return [];
  return [base.symbol.name, ...baseNames(checker, base as ts.InterfaceType)];
}

/** The members of a string literal type or a union of them; null for anything wider. */
function stringLiterals(type: ts.Type | undefined): string[] | null {
  const members = type?.isUnion() ? type.types : type ? [type] : [];
  if (members.length === 0 || !members.every((t) => t.isStringLiteral())) return null;
  return members.map((t) => (t as ts.StringLiteralType).value);
}

function numberLiteral(type: ts.Type | undefined): number | null {
  return type?.isNumberLiteral() ? type.value : null;
}

function booleanLiteral(checker: ts.TypeChecker, type: ts.Type | undefined): boolean | null {
  if (!type || !(type.flags & ts.TypeFlags.BooleanLiteral)) return null;
  return checker.typeToString(type) === 'true';
}

/** Up to the first `.`, `:` or `;` that ends a clause (outside backquotes and parentheses, before a space). */
function firstSentence(doc: string): string {
  const text = doc.replace(/\s+/g, ' ').trim();
  let quoted = false;
  let depth = 0;
  for (let i = 0; i < text.length; i++) {
    const c = text[i]!;
    if (c === '`') quoted = !quoted;
    else if (quoted) continue;
    else if (c === '(') depth++;
    else if (c === ')') depth--;
    else if (depth === 0 && '.:;'.includes(c) && (i + 1 === text.length || text[i + 1] === ' '))
      return `${text.slice(0, i)}.`;
  }
  return text;
}

export function renderRegistry(classes: readonly ErrorClassFacts[]): string {
  const out = [HEADER];
  for (const [file, title] of Object.entries(SECTIONS)) {
    const members = classes.filter((c) => !c.abstract && c.file === `src/errors/${file}`);
    if (members.length === 0) continue;
    out.push(`## ${title}`, '', `\`src/errors/${file}\``, '');
    const rows = members.flatMap((c) => {
      const relayed = RELAYED[c.name] ?? {};
      return (c.codes ?? [relayed.code ?? '?']).map((code) => [
        c.codes ? `\`${code}\`` : code,
        c.status === null ? (relayed.status ?? '?') : String(c.status),
        c.type === null ? (relayed.type ?? '?') : `\`${c.type}\``,
        c.retryable === null ? (relayed.retryable ?? '?') : c.retryable ? 'yes' : 'no',
        `\`${c.name}\``,
        c.status === null ? 'by status' : anthropicColumn(code, c.status, c.type ?? ''),
        c.when,
      ]);
    });
    out.push(
      ...table(['code', 'status', 'OpenAI type', 'retryable', 'class', '/v1/messages', 'when'], rows),
      '',
    );
  }
  out.push(BASES_HEADER);
  const baseRows = classes
    .filter((c) => c.abstract)
    .map((c) => [
      `\`${c.name}\``,
      `\`${c.file}\``,
      c.status === null ? '(each class)' : String(c.status),
      c.when,
    ]);
  out.push(...table(['base', 'file', 'status', 'what'], baseRows), '', RESPONSE_HEADER);
  const responseRows = Object.entries(RESPONSE_CODES).map(([code, when]) => [`\`${code}\``, when]);
  out.push(...table(['code', 'when'], responseRows), '');
  return out.join('\n');
}

/** The Anthropic type (and status, when it is not the OpenAI one) of a code on `/v1/messages`. */
function anthropicColumn(code: string, status: number, openaiType: string): string {
  const anthropicStatus = anthropicStatusOf(code, status);
  const type = anthropicErrorType(anthropicStatus);
  if (anthropicStatus === status && type === openaiType) return 'same';
  return anthropicStatus === status ? `\`${type}\`` : `\`${type}\` ${anthropicStatus}`;
}

function table(header: string[], rows: string[][]): string[] {
  const cells = [header, ...rows].map((row) => row.map((cell) => cell.replaceAll('|', '\\|')));
  const widths = header.map((_, i) => Math.max(3, ...cells.map((row) => row[i]!.length)));
  const line = (row: string[]) => `| ${row.map((cell, i) => cell.padEnd(widths[i]!)).join(' | ')} |`;
  return [line(cells[0]!), line(widths.map((w) => '-'.repeat(w))), ...cells.slice(1).map(line)];
}

const RELAYED_NAMES = Object.keys(RELAYED)
  .map((name) => `\`${name}\``)
  .join(', ');

const HEADER = `# Error codes

<!-- Generated by \`npx tsx scripts/error-registry.ts --write\` from the classes in src/errors/;
test/error-registry.test.ts fails when this file is not what it prints. Do not edit by hand. -->

Every error sluice answers is one class per meaning (\`src/errors/\`), a subclass of \`SluiceError\`
that fixes its \`code\` (or a closed set of codes of one meaning), its HTTP \`status\`, its OpenAI
\`type\` and whether it is \`retryable\`; no constructor takes a status. A code is stable: it is never
reworded once released, and it has one status (except \`invalid_url\`: ${CODES_WITH_TWO_STATUSES.invalid_url}).
Only ${RELAYED_NAMES} relay one of these, from the engine or the error they wrap (their rows say which).

The body is OpenAI's: \`{"error":{"message","type","param","code", ...details}}\`. On \`/v1/messages\`
it is Anthropic's, \`{"type":"error","error":{"type","message","code", ...}}\`: the column
\`/v1/messages\` gives its Anthropic \`type\`, and its status where that differs (529 for a gateway
with no room); "same" when both are the OpenAI ones. A stream that fails after its first byte says
so in the stream instead, as an \`error\` event of type \`api_error\` (\`overloaded_error\` for a 503);
the stream errors and their metric reasons are in [STREAMS.md](STREAMS.md).

\`retryable\` is whether another worker, or the same request sent again later, may succeed; the
dispatcher fails over on it.
`;

const BASES_HEADER = `## Bases

Abstract classes to catch a kind of error by; each subclass above fixes its own code.
`;

const RESPONSE_HEADER = `## Codes of failed responses

A Responses API response that fails after it started carries its error's code in \`error.code\`
(and in its \`response.failed\` event). Two codes there come from no error class:
`;

if (process.argv[1] && fileURLToPath(import.meta.url) === process.argv[1]) {
  const registry = renderRegistry(readErrorClasses());
  if (process.argv.includes('--write')) {
    const before = existsSync(REGISTRY_PATH) ? readFileSync(REGISTRY_PATH, 'utf8') : '';
    writeFileSync(REGISTRY_PATH, registry);
    console.log(before === registry ? 'docs/ERRORS.md is up to date' : 'wrote docs/ERRORS.md');
  } else process.stdout.write(registry);
}
