import { UnmatchedCallOutput } from '../errors/request-content-errors.js';
import type { InputItem, OutputItem } from './types.js';

type ContextItem = InputItem | OutputItem;

/** Where the items checked come from, to name an orphan in the 400. */
export interface ItemsSource {
  /** The request's parameter that holds them: `input` of a create, `items` of a conversation. */
  param: 'input' | 'items';
  /**
   * What they continue, when the request names it for the engine to see (a create's conversation
   * or response chain): its own orphans are refused too. Without it (items added to a
   * conversation) only the request's items are checked, against the calls the history holds.
   */
  history?: { param: 'conversation' | 'previous_response_id'; id: string } | undefined;
}

const callIdOf = (item: ContextItem): string => String((item as { call_id?: unknown }).call_id);

/**
 * The one rule of tool results: every `function_call_output` answers a `function_call` made
 * before it, in the whole context the engine will see (what the request continues, then its own
 * items). An engine shown a tool result for a call that never existed answers nonsense or fails;
 * a client could also pass one off as the result of a call it never had. The first orphan is a 400
 * `unmatched_call_id`: one of the request's items is named by its index (`input[2].call_id`); one
 * of the history (stored before this rule, or left when its call was deleted) by the history's
 * parameter and the item's id, which the client can delete.
 */
export function assertOutputsAnswerCalls(
  history: readonly ContextItem[],
  items: readonly ContextItem[],
  source: ItemsSource,
): void {
  const calls = new Set<string>();
  for (const item of history) {
    if (item.type === 'function_call') calls.add(callIdOf(item));
    else if (item.type === 'function_call_output' && source.history && !calls.has(callIdOf(item))) {
      const { param, id } = source.history;
      throw new UnmatchedCallOutput(callIdOf(item), param, `item '${item.id}' of ${param} '${id}'`);
    }
  }
  items.forEach((item, index) => {
    if (item.type === 'function_call') calls.add(callIdOf(item));
    else if (item.type === 'function_call_output' && !calls.has(callIdOf(item)))
      throw new UnmatchedCallOutput(
        callIdOf(item),
        `${source.param}[${index}].call_id`,
        `${source.param}[${index}]`,
      );
  });
}

/**
 * The history without the tool results whose calls it does not hold: a `previous_response_id`
 * chain cut short (an ancestor deleted, or past the longest chain followed) starts after the cut,
 * and the answers to calls made before it go with them.
 */
export function withoutOrphanOutputs(history: readonly ContextItem[]): ContextItem[] {
  const calls = new Set<string>();
  return history.filter((item) => {
    if (item.type === 'function_call') calls.add(callIdOf(item));
    return item.type !== 'function_call_output' || calls.has(callIdOf(item));
  });
}
