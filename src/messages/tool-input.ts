/**
 * A tool call's JSON arguments as a `tool_use` block's `input` object. Arguments that are not a
 * JSON object (a model that wrote broken JSON) are kept, as text, under `_raw_arguments`.
 */
export function toolInput(args: string | undefined): Record<string, unknown> {
  if (args === undefined || args.trim() === '') return {};
  try {
    const parsed: unknown = JSON.parse(args);
    if (typeof parsed === 'object' && parsed !== null && !Array.isArray(parsed))
      return parsed as Record<string, unknown>;
  } catch {
    // kept as text below
  }
  return { _raw_arguments: args };
}
