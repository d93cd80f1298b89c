/** What a tool call gave: its output text, or the error the engine is told about. */
export type McpCallResult = { output: string; error?: undefined } | { output?: undefined; error: string };

/** The error of an `mcp_call` whose output was over the bound (its code first, for clients to match). */
export function outputTooLarge(limit: number): string {
  return `mcp_output_too_large: the tool's output is larger than ${limit} bytes (mcp.maxOutputBytes); it was cut.`;
}

/** The text of a tool result: its text parts joined, else its structured content as JSON. */
export function resultText(result: {
  content?: unknown;
  structuredContent?: unknown;
  toolResult?: unknown;
}): string {
  if (Array.isArray(result.content)) {
    const parts = result.content.map((part: { type?: unknown; text?: unknown }) =>
      part?.type === 'text' && typeof part.text === 'string' ? part.text : JSON.stringify(part),
    );
    if (parts.length > 0) return parts.join('\n');
  }
  if (result.structuredContent !== undefined) return JSON.stringify(result.structuredContent);
  if (result.toolResult !== undefined) return JSON.stringify(result.toolResult);
  return '';
}
