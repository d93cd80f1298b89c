import type { GbnfJsonSchema } from 'node-llama-cpp';
import { RequestError, type Tool, type ToolChoice } from './request-schema.js';

/**
 * Tool calls on the embedded engine. A forced call (`tool_choice` naming a function, or
 * `"required"`) is generated under a JSON grammar, so the answer is always a call with
 * schema-valid arguments:
 * - one function (named, or `required` with a single tool): the grammar is the function's
 *   parameters schema, and the generated text is the arguments;
 * - `required` with several tools: the grammar is a oneOf of `{"name": <const name>,
 *   "arguments": <that tool's parameters>}`, so name and arguments always belong together.
 * `auto` and `none` generate plain text: the worker does not look for a call in the text.
 */
export type ToolCallPlan =
  | { kind: 'named'; name: string; schema: GbnfJsonSchema }
  | { kind: 'choose'; names: string[]; schema: GbnfJsonSchema };

export function planToolCall(
  tools: readonly Tool[] | null | undefined,
  choice: ToolChoice | null | undefined,
): ToolCallPlan | undefined {
  const available = tools ?? [];
  if (choice === undefined || choice === null || choice === 'none' || choice === 'auto') return undefined;
  const byName = new Map(available.map((tool) => [tool.function.name, tool]));
  if (choice === 'required') {
    if (available.length === 0)
      throw new RequestError("tool_choice 'required' needs at least one tool in `tools`.", 400, {
        param: 'tool_choice',
      });
    if (byName.size === 1) return named(available[0]!);
    const schema: GbnfJsonSchema = {
      oneOf: [...byName.values()].map((tool) => ({
        type: 'object',
        properties: { name: { const: tool.function.name }, arguments: parametersSchema(tool) },
      })),
    };
    return { kind: 'choose', names: [...byName.keys()], schema };
  }
  const tool = byName.get(choice.function.name);
  if (!tool)
    throw new RequestError(
      `tool_choice names the function '${choice.function.name}', which is not in \`tools\`.`,
      400,
      { param: 'tool_choice' },
    );
  return named(tool);
}

function named(tool: Tool): ToolCallPlan {
  return { kind: 'named', name: tool.function.name, schema: parametersSchema(tool) };
}

function parametersSchema(tool: Tool): GbnfJsonSchema {
  const parameters = tool.function.parameters ?? { type: 'object', properties: {} };
  const defs = (parameters.$defs ?? parameters.definitions) as Record<string, unknown> | undefined;
  const schema = toGrammarSchema(parameters);
  if (!defs || typeof defs !== 'object') return schema;
  const $defs = Object.fromEntries(Object.entries(defs).map(([name, def]) => [name, toGrammarSchema(def)]));
  // node-llama-cpp reads $defs on objects, arrays and oneOf.
  return 'type' in schema && (schema.type === 'object' || schema.type === 'array')
    ? { ...schema, $defs }
    : { oneOf: [schema], $defs };
}

/** Any JSON value. */
const ANY: GbnfJsonSchema = {
  oneOf: [
    { type: ['string', 'number', 'boolean', 'null'] },
    { type: 'object', additionalProperties: true },
    { type: 'array' },
  ],
};

const BASIC_TYPES = new Set(['string', 'number', 'integer', 'boolean', 'null']);
type BasicType = 'string' | 'number' | 'integer' | 'boolean' | 'null';

/**
 * A JSON schema (as OpenAI tools carry) as node-llama-cpp's grammar schema. What the grammar
 * cannot express is left out, and the output is then valid for a narrower schema: every declared
 * property is generated (required or not) and no other; `anyOf`/`oneOf` become a choice; number
 * bounds, `pattern` and `allOf` are not enforced; `$ref` must point into `$defs`/`definitions`.
 */
export function toGrammarSchema(input: unknown): GbnfJsonSchema {
  if (typeof input !== 'object' || input === null || Array.isArray(input)) return ANY;
  const s = input as Record<string, unknown>;
  if ('const' in s && isLiteral(s.const)) return { const: s.const };
  if (Array.isArray(s.enum) && s.enum.length > 0 && s.enum.every(isLiteral)) return { enum: s.enum };
  if (typeof s.$ref === 'string') {
    const match = /^#\/(?:\$defs|definitions)\/(.+)$/.exec(s.$ref);
    return match ? ({ $ref: `#/$defs/${match[1]}` } as GbnfJsonSchema) : ANY;
  }
  const alternatives = s.anyOf ?? s.oneOf;
  if (Array.isArray(alternatives) && alternatives.length > 0)
    return { oneOf: alternatives.map((alt) => toGrammarSchema(alt)) };
  if (Array.isArray(s.allOf) && s.allOf.length === 1)
    return toGrammarSchema({ ...s, allOf: undefined, ...s.allOf[0] });

  const types = Array.isArray(s.type) ? (s.type as unknown[]) : s.type === undefined ? [] : [s.type];
  if (types.length > 1) {
    if (types.every((t) => typeof t === 'string' && BASIC_TYPES.has(t)))
      return { type: types as BasicType[] };
    return { oneOf: types.map((type) => toGrammarSchema({ ...s, type })) };
  }
  const type: unknown = types[0] ?? (s.properties ? 'object' : s.items ? 'array' : undefined);
  switch (type) {
    case 'object': {
      const properties = (s.properties ?? {}) as Record<string, unknown>;
      const keys = Object.keys(properties);
      if (keys.length === 0)
        return { type: 'object', additionalProperties: s.additionalProperties !== false };
      return {
        type: 'object',
        properties: Object.fromEntries(keys.map((key) => [key, toGrammarSchema(properties[key])])),
      };
    }
    case 'array': {
      const out: Record<string, unknown> = { type: 'array' };
      if (s.items !== undefined && typeof s.items === 'object') out.items = toGrammarSchema(s.items);
      if (Array.isArray(s.prefixItems)) out.prefixItems = s.prefixItems.map((item) => toGrammarSchema(item));
      if (typeof s.minItems === 'number') out.minItems = s.minItems;
      if (typeof s.maxItems === 'number') out.maxItems = s.maxItems;
      return out as GbnfJsonSchema;
    }
    case 'string': {
      if (s.format === 'date-time' || s.format === 'date' || s.format === 'time')
        return { type: 'string', format: s.format };
      const out: Record<string, unknown> = { type: 'string' };
      if (typeof s.minLength === 'number') out.minLength = s.minLength;
      if (typeof s.maxLength === 'number') out.maxLength = s.maxLength;
      return out as GbnfJsonSchema;
    }
    case 'number':
    case 'integer':
    case 'boolean':
    case 'null':
      return { type };
    default:
      return ANY;
  }
}

function isLiteral(value: unknown): value is string | number | boolean | null {
  return value === null || ['string', 'number', 'boolean'].includes(typeof value);
}

const ENVELOPE_HEAD = /^\s*\{\s*"name"\s*:\s*("(?:[^"\\]|\\.)*")\s*,\s*"arguments"\s*:\s*/;
const ENVELOPE_TAIL = /[\s}]*$/;

export interface ToolCallEvents {
  /** The call begins: its function name is known. */
  start(name: string): void | Promise<void>;
  /** A piece of the arguments' JSON text. */
  arguments(piece: string): void | Promise<void>;
}

/**
 * Turns the generated text of a forced call into a function name and argument pieces, as they
 * become known: for a named function at once; for a choice once `{"name": "...", "arguments": `
 * has been generated, with the closing `}` of that envelope held back (a run of `}` and
 * whitespace at the end of the text waits until more text or the end shows what it is).
 */
export class ToolCallText {
  name: string | undefined;
  arguments = '';
  /** Text generated before the name was known (all of it, if the name never came). */
  private pending = '';

  constructor(
    private readonly plan: ToolCallPlan,
    private readonly events: ToolCallEvents,
  ) {}

  async begin(): Promise<void> {
    if (this.plan.kind === 'named') await this.started(this.plan.name);
  }

  async push(text: string): Promise<void> {
    if (this.name === undefined) {
      this.pending += text;
      const head = ENVELOPE_HEAD.exec(this.pending);
      if (!head) return;
      const rest = this.pending.slice(head[0].length);
      this.pending = '';
      await this.started(JSON.parse(head[1]!) as string);
      return this.push(rest);
    }
    if (this.plan.kind === 'named') return this.emit(text);
    this.pending += text;
    const tail = ENVELOPE_TAIL.exec(this.pending)!;
    const ready = this.pending.slice(0, tail.index);
    this.pending = this.pending.slice(tail.index);
    if (ready) await this.emit(ready);
  }

  /** At the end of generation: the held-back text, less the envelope's closing brace. */
  async end(): Promise<void> {
    if (this.name === undefined || this.plan.kind === 'named') return;
    const rest = this.pending.replace(/\s*\}\s*$/, '');
    this.pending = '';
    if (rest) await this.emit(rest);
  }

  /** Text that never became a call (generation ended before the function name). */
  get unparsed(): string {
    return this.name === undefined ? this.pending : '';
  }

  private async started(name: string): Promise<void> {
    this.name = name;
    await this.events.start(name);
  }

  private async emit(piece: string): Promise<void> {
    this.arguments += piece;
    await this.events.arguments(piece);
  }
}
