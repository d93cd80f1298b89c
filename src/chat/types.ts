/** A chat-completions message, as engines accept it: what every front's request becomes. */
export interface ChatMessage {
  role: 'system' | 'user' | 'assistant' | 'tool';
  content: string | unknown[] | null;
  tool_calls?: { id: string; type: 'function'; function: { name: string; arguments: string } }[];
  tool_call_id?: string;
}

/** A chat-completions request body built by a front: its messages, and any other parameter. */
export type ChatRequestBody = Record<string, unknown> & { messages: ChatMessage[] };
