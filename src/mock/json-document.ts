import { type FinishReason, sequence } from './generate.js';

/**
 * The mock's answer when a chat request's `response_format` asks for JSON, as an engine that
 * enforces it (vLLM, SGLang) answers: one JSON document, valid against the schema given, from its
 * start whatever the messages hold; so an assistant prefill is not continued but followed by a
 * new document, as those engines do. Each string holds `words` words of the mock's sequence.
 * Streamed in pieces of 4 characters.
 */
export class DocumentCompletion {
  readonly generated: number;
  readonly pieces: number;
  readonly finishReason: FinishReason = 'stop';

  constructor(private readonly document: string) {
    this.pieces = Math.ceil(document.length / 4);
    this.generated = this.pieces;
  }

  piece(i: number): string {
    return this.document.slice(i * 4, i * 4 + 4);
  }

  pieceJson(i: number): string {
    return JSON.stringify(this.piece(i));
  }

  text(): string {
    return this.document;
  }
}

type Schema = {
  type?: unknown;
  properties?: Record<string, Schema>;
  items?: Schema;
  enum?: unknown[];
  const?: unknown;
} | null;

/** A value valid against `schema` (the subset the mock knows: types, properties, items, enum, const). */
function instanceOf(schema: Schema, words: number, depth: number): unknown {
  if (!schema || typeof schema !== 'object' || depth > 8) return null;
  if ('const' in schema) return schema.const;
  if (Array.isArray(schema.enum) && schema.enum.length > 0) return schema.enum[0];
  const type = Array.isArray(schema.type) ? schema.type[0] : schema.type;
  if (type === 'object' || (type === undefined && schema.properties)) {
    const out: Record<string, unknown> = {};
    for (const [key, sub] of Object.entries(schema.properties ?? {}))
      out[key] = instanceOf(sub, words, depth + 1);
    return out;
  }
  if (type === 'string') return sequence(words).trim();
  if (type === 'integer' || type === 'number') return 7;
  if (type === 'boolean') return true;
  if (type === 'array') return [instanceOf(schema.items ?? null, words, depth + 1)];
  return null;
}

/** The document a `response_format` asks for, or undefined when it asks for text. */
export function documentFor(format: unknown, words: number): string | undefined {
  const f = format as { type?: unknown; json_schema?: { schema?: Schema } } | null | undefined;
  if (f?.type === 'json_object') return JSON.stringify({ answer: sequence(words).trim() });
  if (f?.type === 'json_schema') return JSON.stringify(instanceOf(f.json_schema?.schema ?? null, words, 0));
  return undefined;
}
