import type { IncomingHttpHeaders } from 'node:http';
import { bearerToken } from '../auth/index.js';
import { chatPromptText } from '../chat/request-schema.js';
import { anthropicStatus } from '../messages/errors.js';
import { toMessage } from '../messages/from-chat.js';
import { messagesRequestSchema } from '../messages/request-schema.js';
import { toChatRequest } from '../messages/to-chat.js';
import type { GenerationFront, Translation } from '../pipeline/front.js';
import { headerValue } from '../pipeline/request-headers.js';
import { validateBody } from '../pipeline/validate-body.js';
import { MessagesStreamEncoder } from './messages-stream.js';

export const MESSAGES_PATH = '/v1/messages';

/** Anthropic clients send their key as `x-api-key`; `Authorization: Bearer` works too. */
export function anthropicCredential(headers: IncomingHttpHeaders): string | undefined {
  return headerValue(headers, 'x-api-key') ?? bearerToken(headers.authorization);
}

/**
 * Anthropic's Messages API translated onto the chat-completions workers: the request becomes a
 * chat request, the stream Anthropic's events (MessagesStreamEncoder), the answer a message,
 * and errors take Anthropic's statuses.
 */
export const MESSAGES_FRONT: GenerationFront = {
  api: 'messages',
  path: MESSAGES_PATH,
  credential: anthropicCredential,
  statusOf: anthropicStatus,
  translate(request): Translation {
    const body = validateBody(messagesRequestSchema, request.body);
    const chatBody = toChatRequest(body);
    return {
      model: body.model,
      path: '/v1/chat/completions',
      stream: body.stream === true,
      body: chatBody,
      payload: JSON.stringify(chatBody),
      outputTokens: [['max_tokens', body.max_tokens]],
      // The same text as chat's: a conversation routes alike on either API (cache-aware routing).
      promptText: () => chatPromptText(chatBody),
      hiddenUsage: false,
      // The model that answers, as chat's chunks and whole answers name it (a fallback, when it fell back).
      encoder: (requestId, model) => new MessagesStreamEncoder(requestId, model, body.stop_sequences),
      answer: (done) => ({
        payload: toMessage(done.json, done.attempt.model, body.stop_sequences),
        headers: { 'request-id': request.id },
      }),
      traced: request.body as Record<string, unknown>,
      fallbacks: body.fallbacks,
    };
  },
};
