import { ConversationNotFound, PreviousResponseNotFound } from '../errors/not-found-errors.js';
import { InvalidValue } from '../errors/request-errors.js';
import type { Store, StoredResponse } from '../storage/types.js';
import { type ItemsSource, withoutOrphanOutputs } from './call-outputs.js';
import { type Caller, visibleTo } from './ownership.js';
import { markMade } from './provenance.js';
import type { CreateResponseRequest } from './request-schema.js';
import type { InputItem, OutputItem } from './types.js';

/** How far back a `previous_response_id` chain is followed. */
const MAX_CHAIN = 256;

export interface ResolvedContext {
  /** Earlier items (oldest first) the new input is appended to. */
  history: (InputItem | OutputItem)[];
  previousResponseId: string | null;
  conversationId: string | null;
}

function itemsOf(response: StoredResponse): (InputItem | OutputItem)[] {
  const input = JSON.parse(response.inputItemsJson) as InputItem[];
  const output = (JSON.parse(response.json) as { output?: OutputItem[] }).output ?? [];
  // What a stored response output, the gateway made; its input, the client sent.
  markMade(output);
  return [...input, ...output];
}

/** What a context's items come from, as `assertOutputsAnswerCalls` names an orphan among them. */
export function contextSource(context: ResolvedContext, param: ItemsSource['param']): ItemsSource {
  if (context.conversationId)
    return { param, history: { param: 'conversation', id: context.conversationId } };
  if (context.previousResponseId)
    return { param, history: { param: 'previous_response_id', id: context.previousResponseId } };
  return { param };
}

/**
 * Rebuilds what came before a request: the chain of `previous_response_id` (each response's
 * input then output, oldest first), or the items of its `conversation`. Unknown ids, and those
 * another API key owns, are 404s.
 */
export async function resolveContext(
  store: Store | undefined,
  request: CreateResponseRequest,
  caller: Caller,
): Promise<ResolvedContext> {
  const conversation = request.conversation;
  const conversationId = typeof conversation === 'string' ? conversation : (conversation?.id ?? null);
  if (request.previous_response_id && conversationId) {
    throw new InvalidValue(
      'previous_response_id and conversation cannot be used together.',
      'previous_response_id',
    );
  }
  if (request.previous_response_id) {
    if (!store) throw new PreviousResponseNotFound(request.previous_response_id);
    const chain: StoredResponse[] = [];
    let id: string | null = request.previous_response_id;
    let cut = false;
    while (id) {
      if (chain.length === MAX_CHAIN) {
        cut = true;
        break;
      }
      const stored = await store.getResponse(id);
      const found = stored && visibleTo(stored.ownerKeyId, caller) ? stored : undefined;
      if (!found) {
        if (chain.length === 0) throw new PreviousResponseNotFound(id);
        cut = true; // an ancestor was deleted: the context starts after it
        break;
      }
      chain.push(found);
      id = found.previousResponseId;
    }
    const whole = chain.reverse().flatMap(itemsOf);
    // Cut short, the chain starts after the cut: the answers to calls made before it go too.
    const history = cut ? withoutOrphanOutputs(whole) : whole;
    return { history, previousResponseId: request.previous_response_id, conversationId: null };
  }
  if (conversationId) {
    const owned = store ? await store.getConversation(conversationId) : undefined;
    const items =
      store && owned && visibleTo(owned.ownerKeyId, caller)
        ? await store.allConversationItems(conversationId)
        : undefined;
    if (!items) throw new ConversationNotFound(conversationId, 'conversation');
    return {
      history: items.map((item) => JSON.parse(item.json) as InputItem),
      previousResponseId: null,
      conversationId,
    };
  }
  return { history: [], previousResponseId: null, conversationId: null };
}
