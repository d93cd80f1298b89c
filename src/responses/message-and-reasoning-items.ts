/** The message and the reasoning item of a response: opened, a delta per fragment, their done ladder. */
import type { EventSequence } from './event-sequence.js';
import { newId } from './ids.js';
import type { ItemStatus, MessageItem, OutputText, ReasoningItem, ReasoningText } from './types.js';

/** The two kinds of text item: the assistant's message and its reasoning. */
export type TextKind = 'message' | 'reasoning';

interface OpenText {
  item: MessageItem | ReasoningItem;
  index: number;
}

/** Which text items are open; saved to retract a terminal draft. */
export type OpenTexts = Readonly<Record<TextKind, OpenText | undefined>>;

/** How the two kinds of text item differ on the wire. */
const TEXT_EVENTS = {
  message: {
    delta: 'response.output_text.delta',
    done: 'response.output_text.done',
    extra: { logprobs: [] },
    part: (): OutputText => ({ type: 'output_text', text: '', annotations: [], logprobs: [] }),
  },
  reasoning: {
    delta: 'response.reasoning_text.delta',
    done: 'response.reasoning_text.done',
    extra: {},
    part: (): ReasoningText => ({ type: 'reasoning_text', text: '' }),
  },
} as const;

/**
 * The message and the reasoning item of a response, at most one of each open: opened by their
 * first delta (`output_item.added`, `content_part.added`), then a text delta per fragment, and
 * closed by their done ladder (text done, `content_part.done`, `output_item.done`).
 */
export class TextItems {
  private readonly open: Record<TextKind, OpenText | undefined> = {
    message: undefined,
    reasoning: undefined,
  };

  constructor(private readonly events: EventSequence) {}

  /** Reasoning text: closes the message, appends to the reasoning item. */
  reasoningDelta(text: string): void {
    this.close('message', 'completed');
    this.append('reasoning', text);
  }

  /** Message text: closes the reasoning, appends to the message item. */
  messageDelta(text: string): void {
    this.close('reasoning', 'completed');
    this.append('message', text);
  }

  /** Closes the reasoning item, then the message item, those that are open. */
  closeBoth(status: ItemStatus): void {
    this.close('reasoning', status);
    this.close('message', status);
  }

  /** The done ladder of a message or reasoning item: text done, content_part.done, output_item.done. */
  close(kind: TextKind, status: ItemStatus): void {
    const open = this.open[kind];
    if (!open) return;
    this.open[kind] = undefined;
    const { item, index } = open;
    const part = item.content[0]!;
    this.events.emit({
      type: TEXT_EVENTS[kind].done,
      item_id: item.id,
      output_index: index,
      content_index: 0,
      text: part.text,
      ...TEXT_EVENTS[kind].extra,
    });
    this.events.emit({
      type: 'response.content_part.done',
      item_id: item.id,
      output_index: index,
      content_index: 0,
      part,
    });
    item.status = status;
    this.events.emit({ type: 'response.output_item.done', output_index: index, item });
  }

  /** Opens again an item of a response stored mid-way (with an empty part if it had none). */
  reopen(item: MessageItem | ReasoningItem, index: number): void {
    if (item.content.length === 0) {
      const part = TEXT_EVENTS[item.type].part();
      (item.content as (OutputText | ReasoningText)[]).push(part);
    }
    this.open[item.type] = { item, index };
  }

  save(): OpenTexts {
    return { ...this.open };
  }

  restore(saved: OpenTexts): void {
    this.open.message = saved.message;
    this.open.reasoning = saved.reasoning;
  }

  /** Appends to the open message or reasoning item, opening it (added, content_part.added) first. */
  private append(kind: TextKind, text: string): void {
    let open = this.open[kind];
    if (!open) {
      const id = newId(kind === 'message' ? 'msg' : 'rs');
      const item: MessageItem | ReasoningItem =
        kind === 'message'
          ? { id, type: 'message', status: 'in_progress', role: 'assistant', content: [] }
          : { id, type: 'reasoning', status: 'in_progress', summary: [], content: [] };
      const index = this.events.addItem(item);
      const part = TEXT_EVENTS[kind].part();
      this.events.emit({
        type: 'response.content_part.added',
        item_id: id,
        output_index: index,
        content_index: 0,
        part,
      });
      (item.content as (OutputText | ReasoningText)[]).push({ ...part });
      open = { item, index };
      this.open[kind] = open;
    }
    open.item.content[0]!.text += text;
    this.events.emit({
      type: TEXT_EVENTS[kind].delta,
      item_id: open.item.id,
      output_index: open.index,
      content_index: 0,
      delta: text,
      ...TEXT_EVENTS[kind].extra,
    });
  }
}
