/** Anthropic's `stop_reason` values sluice produces. */
export type StopReason = 'end_turn' | 'max_tokens' | 'stop_sequence' | 'tool_use' | 'refusal';

/**
 * A chat `finish_reason` as Anthropic's `stop_reason` and `stop_sequence`. `stop` is
 * `stop_sequence` when the engine says which stop string matched (vLLM's `stop_reason` in the
 * choice) and it is one the client asked for, else `end_turn`.
 */
export function toStopReason(
  finishReason: string | undefined,
  engineStopReason: unknown,
  stopSequences: readonly string[] | undefined,
): { stop_reason: StopReason; stop_sequence: string | null } {
  switch (finishReason) {
    case 'length':
      return { stop_reason: 'max_tokens', stop_sequence: null };
    case 'tool_calls':
    case 'function_call':
      return { stop_reason: 'tool_use', stop_sequence: null };
    case 'content_filter':
      return { stop_reason: 'refusal', stop_sequence: null };
    default:
      if (typeof engineStopReason === 'string' && stopSequences?.includes(engineStopReason)) {
        return { stop_reason: 'stop_sequence', stop_sequence: engineStopReason };
      }
      return { stop_reason: 'end_turn', stop_sequence: null };
  }
}
