import { z } from 'zod';
import { ConversationItemNotFound, ConversationNotFound } from '../errors/not-found-errors.js';
import { UnknownCursor } from '../errors/request-content-errors.js';
import { StorageDisabled } from '../errors/storage-errors.js';
import type { PageRequest, Store, StoredItem } from '../storage/types.js';
import { assertOutputsAnswerCalls } from './call-outputs.js';
import { newId } from './ids.js';
import { normaliseInput } from './input-items.js';
import { type Caller, visibleTo } from './ownership.js';
import { inputItemSchema } from './request-schema.js';
import type { InputItem } from './types.js';

const metadataSchema = z
  .record(z.string().max(64), z.string().max(512))
  .refine((m) => Object.keys(m).length <= 16, 'at most 16 metadata keys');

export const createConversationSchema = z.looseObject({
  metadata: metadataSchema.nullable().optional(),
  items: z.array(inputItemSchema).max(20).nullable().optional(),
});

export const updateConversationSchema = z.looseObject({ metadata: metadataSchema });

export const addItemsSchema = z.looseObject({ items: z.array(inputItemSchema).min(1).max(20) });

export interface ConversationObject {
  id: string;
  object: 'conversation';
  created_at: number;
  metadata: Record<string, string>;
}

function toItems(items: InputItem[]): StoredItem[] {
  return items.map((item) => ({ id: item.id, json: JSON.stringify(item) }));
}

/**
 * The Conversations API: a durable list of items that responses can read and append to. Every
 * call names its caller (the API key): a conversation another key created is a 404.
 */
export class ConversationsService {
  constructor(private readonly store: Store | undefined) {}

  private get backend(): Store {
    if (!this.store) throw new StorageDisabled('This gateway has no storage configured.');
    return this.store;
  }

  async create(body: z.output<typeof createConversationSchema>, caller: Caller): Promise<ConversationObject> {
    const conversation: ConversationObject = {
      id: newId('conv'),
      object: 'conversation',
      created_at: Math.floor(Date.now() / 1000),
      metadata: body.metadata ?? {},
    };
    const normalised = normaliseInput(body.items ?? []);
    assertOutputsAnswerCalls([], normalised, { param: 'items' });
    const items = toItems(normalised);
    await this.backend.insertConversation(
      {
        id: conversation.id,
        createdAt: conversation.created_at,
        metadataJson: JSON.stringify(conversation.metadata),
        ownerKeyId: caller,
      },
      items,
    );
    return conversation;
  }

  async get(id: string, caller: Caller): Promise<ConversationObject> {
    const stored = await this.backend.getConversation(id);
    if (!stored || !visibleTo(stored.ownerKeyId, caller)) throw notFound(id);
    return {
      id: stored.id,
      object: 'conversation',
      created_at: stored.createdAt,
      metadata: JSON.parse(stored.metadataJson) as Record<string, string>,
    };
  }

  async update(id: string, metadata: Record<string, string>, caller: Caller): Promise<ConversationObject> {
    const conversation = await this.get(id, caller);
    if (!(await this.backend.updateConversationMetadata(id, JSON.stringify(metadata)))) throw notFound(id);
    return { ...conversation, metadata };
  }

  async delete(id: string, caller: Caller): Promise<void> {
    await this.get(id, caller);
    if (!(await this.backend.deleteConversation(id))) throw notFound(id);
  }

  async listItems(
    id: string,
    page: PageRequest,
    caller: Caller,
  ): Promise<{ data: InputItem[]; hasMore: boolean }> {
    await this.get(id, caller);
    const found = await this.backend.listConversationItems(id, page);
    if (!found) throw notFound(id);
    // An `after` that names no item of the conversation pages nothing: a 400, as for a stored
    // response's input items (a mistyped cursor must not read as the end of the list).
    if (
      page.after !== undefined &&
      found.data.length === 0 &&
      !(await this.backend.getConversationItem(id, page.after))
    )
      throw new UnknownCursor(page.after);
    return { data: found.data.map((item) => JSON.parse(item.json) as InputItem), hasMore: found.hasMore };
  }

  async addItems(
    id: string,
    items: z.output<typeof addItemsSchema>['items'],
    caller: Caller,
  ): Promise<InputItem[]> {
    await this.get(id, caller);
    const normalised = normaliseInput(items);
    // A tool result answers a call the conversation already holds, or one added before it here.
    if (normalised.some((item) => item.type === 'function_call_output')) {
      const held = (await this.backend.allConversationItems(id)) ?? [];
      const history = held.map((item) => JSON.parse(item.json) as InputItem);
      assertOutputsAnswerCalls(history, normalised, { param: 'items' });
    }
    if (!(await this.backend.appendConversationItems(id, toItems(normalised)))) throw notFound(id);
    return normalised;
  }

  async getItem(id: string, itemId: string, caller: Caller): Promise<InputItem> {
    await this.get(id, caller);
    const item = await this.backend.getConversationItem(id, itemId);
    if (!item) throw new ConversationItemNotFound(id, itemId);
    return JSON.parse(item.json) as InputItem;
  }

  async deleteItem(id: string, itemId: string, caller: Caller): Promise<ConversationObject> {
    const conversation = await this.get(id, caller);
    if (!(await this.backend.deleteConversationItem(id, itemId))) {
      throw new ConversationItemNotFound(id, itemId);
    }
    return conversation;
  }
}

function notFound(id: string): ConversationNotFound {
  return new ConversationNotFound(id, 'conversation_id');
}
