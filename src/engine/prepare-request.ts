import type { Token } from 'node-llama-cpp';
import { toChatHistory } from './chat-history.js';
import type { LlamaEngine, Sampling } from './llama-engine.js';
import type { Api } from './openai-shapes.js';
import {
  type ChatRequest,
  type CompletionRequest,
  chatRequestSchema,
  completionRequestSchema,
  parseRequest,
  RequestError,
} from './request-schema.js';
import { planToolCall, type ToolCallPlan } from './tools.js';

export interface PreparedRequest {
  prompt: Token[];
  sampling: Sampling;
  stream: boolean;
  includeUsage: boolean;
  /** A forced tool call, generated under a JSON grammar (chat only). */
  toolCall?: ToolCallPlan | undefined;
}

function chatPrompt(engine: LlamaEngine, request: ChatRequest): Token[] {
  if (!engine.hasChatTemplate) throw new RequestError('The model has no chat template.', 400);
  const history = toChatHistory(request.messages, {
    addGenerationPrompt: request.add_generation_prompt,
    continueFinalMessage: request.continue_final_message,
  });
  return engine.chatTokens(history);
}

function completionPrompt(engine: LlamaEngine, request: CompletionRequest): Token[] {
  const prompt = engine.promptTokens(request.prompt);
  const vocabulary = engine.vocabularySize;
  if (vocabulary !== undefined && prompt.some((t) => t >= vocabulary))
    throw new RequestError(`Token id out of range: the vocabulary has ${vocabulary} tokens.`, 400);
  return prompt;
}

/** Validates a request body and turns it into prompt tokens and sampling settings. */
export function prepareRequest(
  engine: LlamaEngine,
  api: Api,
  body: unknown,
  modelName: string,
): PreparedRequest {
  let request: ChatRequest | CompletionRequest;
  let prompt: Token[];
  let maxTokens: number | null | undefined;
  let toolCall: ToolCallPlan | undefined;
  if (api === 'chat') {
    const chat = parseRequest(chatRequestSchema, body);
    checkModel(chat.model, modelName);
    toolCall = planToolCall(chat.tools, chat.tool_choice);
    prompt = chatPrompt(engine, chat);
    maxTokens = chat.max_completion_tokens ?? chat.max_tokens;
    request = chat;
  } else {
    const completion = parseRequest(completionRequestSchema, body);
    checkModel(completion.model, modelName);
    prompt = completionPrompt(engine, completion);
    maxTokens = completion.max_tokens;
    request = completion;
  }
  if (prompt.length === 0) throw new RequestError('The prompt is empty.', 400);

  const room = engine.contextSize - prompt.length;
  const wanted = maxTokens ?? 1;
  if (wanted > room) {
    throw new RequestError(
      `This model's maximum context length is ${engine.contextSize} tokens. However, you requested ` +
        `${prompt.length + wanted} tokens (${prompt.length} in the prompt, ${wanted} in the completion). ` +
        'Please reduce the length of the prompt or completion.',
      400,
    );
  }
  // A stop string could cut a call's JSON short: a forced call ends when its JSON is complete.
  const stop = toolCall ? [] : (request.stop ?? []);
  return {
    prompt,
    sampling: {
      maxTokens: maxTokens ?? room,
      temperature: request.temperature ?? 1,
      topP: request.top_p ?? 1,
      seed: typeof request.seed === 'number' ? request.seed >>> 0 : undefined, // llama.cpp takes a uint32
      stop: typeof stop === 'string' ? [stop] : stop,
      ignoreEos: request.ignore_eos === true,
    },
    stream: request.stream === true,
    includeUsage: request.stream_options?.include_usage === true,
    toolCall,
  };
}

function checkModel(requested: string, served: string): void {
  if (requested !== served) throw new RequestError(`The model \`${requested}\` does not exist.`, 404);
}
