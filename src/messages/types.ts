import type { StopReason } from './stop-reason.js';

/** The response side of Anthropic's Messages API, as sluice produces it. */
export type OutputBlock =
  | { type: 'text'; text: string }
  | { type: 'thinking'; thinking: string; signature: string }
  | { type: 'tool_use'; id: string; name: string; input: Record<string, unknown> };

export interface MessageUsage {
  input_tokens: number;
  output_tokens: number;
}

export interface MessageObject {
  id: string;
  type: 'message';
  role: 'assistant';
  model: string;
  content: OutputBlock[];
  stop_reason: StopReason | null;
  stop_sequence: string | null;
  usage: MessageUsage;
}

/**
 * The signature of a thinking block. Anthropic signs its thinking so that it can be sent back;
 * open engines sign nothing, and sluice drops thinking blocks sent back, so it is empty.
 */
export const THINKING_SIGNATURE = '';
