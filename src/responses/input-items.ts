import { newId } from './ids.js';
import type { InputItemRequest } from './request-schema.js';
import type { InputItem } from './types.js';

/**
 * Normalises a request's `input` into stored items, each with an id: a string becomes one
 * user message; a message's string content becomes an `input_text` (or, for the assistant,
 * `output_text`) part, as OpenAI lists them at `/input_items`.
 */
export function normaliseInput(input: string | readonly InputItemRequest[]): InputItem[] {
  if (typeof input === 'string') {
    return [
      { id: newId('msg'), type: 'message', role: 'user', content: [{ type: 'input_text', text: input }] },
    ];
  }
  return input.map((item): InputItem => {
    switch (item.type) {
      case 'message': {
        const partType = item.role === 'assistant' ? 'output_text' : 'input_text';
        const content =
          typeof item.content === 'string' ? [{ type: partType, text: item.content }] : item.content;
        return {
          ...item,
          id: item.id ?? newId('msg'),
          type: 'message',
          content,
          status: item.status ?? 'completed',
        };
      }
      case 'function_call':
        return { ...item, id: item.id ?? newId('fc'), status: item.status ?? 'completed' };
      case 'function_call_output':
        return { ...item, id: item.id ?? newId('fco'), status: item.status ?? 'completed' };
      case 'compaction':
        return { ...item, id: item.id ?? newId('cmp') };
      default:
        return { ...item, id: item.id ?? newId(item.type === 'reasoning' ? 'rs' : 'item') };
    }
  });
}
