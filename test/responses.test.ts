import OpenAI, { APIError } from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Gateway } from '../src/gateway.js';
import { sequence } from '../src/mock/generate.js';
import type { MockWorker } from '../src/mock/mock-worker.js';
import { backends, storedRows } from './helpers/backends.js';
import { eventually, metric, metricOrZero, post, startGateway, startMocks } from './helpers/gateway.js';

interface RawEvent {
  type: string;
  sequence_number: number;
  response?: { id: string; status: string; output: { type: string; status: string }[] };
  [key: string]: unknown;
}

/** Parses a Responses SSE body into its events, keeping each `data` text as sent. */
function parseEvents(text: string): { event: RawEvent; data: string; name: string }[] {
  return text
    .split('\n\n')
    .filter((block) => block.trim().length > 0)
    .map((block) => {
      const name = /^event: (.*)$/m.exec(block)?.[1] ?? '';
      const data = /^data: (.*)$/m.exec(block)?.[1] ?? '';
      return { event: JSON.parse(data) as RawEvent, data, name };
    });
}

/** The exact JSON text of the `response` inside a terminal event's data. */
function terminalResponseText(data: string): string {
  const start = data.indexOf('"response":') + '"response":'.length;
  return data.slice(start, -1);
}

for (const backend of backends()) {
  describe(`Responses API on chat-completions workers (${backend.name} storage)`, () => {
    let workers: MockWorker[];
    let gateway: Gateway;
    let client: OpenAI;
    const url = () => `${gateway.url}/v1/responses`;
    const lastBody = () =>
      workers.flatMap((w) => w.stats.lastBodies).at(-1) as { messages: { role: string; content: unknown }[] };

    beforeAll(async () => {
      workers = await startMocks(1, { tokensPerSecond: 0 });
      gateway = await startGateway({
        workers: workers.map((w) => ({ url: w.url })),
        storage: backend.storage(),
      });
      client = new OpenAI({ baseURL: `${gateway.url}/v1`, apiKey: 'x', maxRetries: 0 });
    });
    afterAll(async () => {
      await gateway.close();
      await Promise.all(workers.map((w) => w.close()));
      await backend.cleanup();
    });

    it('creates a response and retrieves the very bytes it answered', async () => {
      const created = await post(url(), { model: 'mock-model', input: 'hello', instructions: 'be brief' });
      expect(created.status).toBe(200);
      const response = created.json() as OpenAI.Responses.Response;
      expect(response).toMatchObject({
        object: 'response',
        status: 'completed',
        model: 'mock-model',
        store: true,
      });
      expect(response.id).toMatch(/^resp_/);
      // Fields the Open Responses ResponseResource schema requires.
      expect(response).toMatchObject({
        presence_penalty: 0,
        frequency_penalty: 0,
        top_logprobs: 0,
        max_tool_calls: null,
        service_tier: 'default',
        safety_identifier: null,
        prompt_cache_key: null,
        truncation: 'disabled',
      });
      const message = response.output[0] as OpenAI.Responses.ResponseOutputMessage;
      expect(message).toMatchObject({ type: 'message', role: 'assistant', status: 'completed' });
      expect((message.content[0] as OpenAI.Responses.ResponseOutputText).text).toBe(sequence(16));
      expect(response.usage).toMatchObject({ output_tokens: 16 });
      expect(response.usage!.input_tokens).toBeGreaterThan(0);
      // Translated to chat: instructions as the system message, then the input.
      expect(lastBody().messages).toEqual([
        { role: 'system', content: 'be brief' },
        { role: 'user', content: 'hello' },
      ]);
      const stored = await fetch(`${url()}/${response.id}`);
      expect(await stored.text()).toBe(created.text);
      const sdk = await client.responses.retrieve(response.id);
      expect(sdk.output_text).toBe(sequence(16));
    });

    it('streams the full event ladder with strictly increasing sequence numbers', async () => {
      const stream = client.responses.stream({ model: 'mock-model', input: 'stream please' });
      const types: string[] = [];
      const numbers: number[] = [];
      let text = '';
      for await (const event of stream) {
        types.push(event.type);
        numbers.push(event.sequence_number);
        if (event.type === 'response.output_text.delta') text += event.delta;
      }
      const final = await stream.finalResponse();
      expect(types).toEqual([
        'response.created',
        'response.in_progress',
        'response.output_item.added',
        'response.content_part.added',
        ...Array(16).fill('response.output_text.delta'),
        'response.output_text.done',
        'response.content_part.done',
        'response.output_item.done',
        'response.completed',
      ]);
      expect(numbers).toEqual(numbers.map((_, i) => i));
      expect(text).toBe(sequence(16));
      expect(final.output_text).toBe(sequence(16));
      expect(final.status).toBe('completed');
    });

    it('stores exactly the terminal event, and replays the stored events', async () => {
      const res = await post(url(), { model: 'mock-model', input: 'x', stream: true, max_output_tokens: 4 });
      const events = parseEvents(res.text);
      const last = events.at(-1)!;
      expect(last.name).toBe('response.incomplete');
      expect(last.event.response!.status).toBe('incomplete');
      const id = last.event.response!.id;
      const stored = await (await fetch(`${url()}/${id}`)).text();
      expect(stored).toBe(terminalResponseText(last.data));
      const replay = parseEvents(await (await fetch(`${url()}/${id}?stream=true`)).text());
      expect(replay.map((e) => e.data)).toEqual(events.map((e) => e.data));
      const tail = parseEvents(await (await fetch(`${url()}/${id}?stream=true&starting_after=5`)).text());
      expect(tail[0]!.event.sequence_number).toBe(6);
    });

    it('max_output_tokens stops on a limit: response.incomplete with incomplete_details', async () => {
      const response = await client.responses.create({
        model: 'mock-model',
        input: 'x',
        max_output_tokens: 3,
      });
      expect(response.status).toBe('incomplete');
      expect(response.incomplete_details).toEqual({ reason: 'max_output_tokens' });
      expect(response.output[0]).toMatchObject({ type: 'message', status: 'incomplete' });
      expect(response.output_text).toBe(sequence(3));
    });

    it('function tools: a function_call item with streamed arguments, then its output in the next turn', async () => {
      const tools: OpenAI.Responses.FunctionTool[] = [
        {
          type: 'function',
          name: 'get_weather',
          description: 'weather',
          parameters: { type: 'object', properties: { city: { type: 'string' } } },
          strict: false,
        },
      ];
      const stream = client.responses.stream(
        { model: 'mock-model', input: 'weather in Paris?', tools, tool_choice: 'auto' },
        { headers: { 'x-mock-tool-call': 'get_weather' } },
      );
      const types: string[] = [];
      let args = '';
      for await (const event of stream) {
        types.push(event.type);
        if (event.type === 'response.function_call_arguments.delta') args += event.delta;
      }
      const first = await stream.finalResponse();
      expect(types).toContain('response.function_call_arguments.done');
      const call = first.output[0] as OpenAI.Responses.ResponseFunctionToolCall;
      expect(call).toMatchObject({ type: 'function_call', name: 'get_weather', status: 'completed' });
      expect(JSON.parse(call.arguments)).toEqual({ city: 'Paris', unit: 'celsius' });
      expect(args).toBe(call.arguments);
      const sent = lastBody() as unknown as { tools: unknown[]; tool_choice: unknown };
      expect(sent.tools).toEqual([
        {
          type: 'function',
          function: {
            name: 'get_weather',
            description: 'weather',
            parameters: { type: 'object', properties: { city: { type: 'string' } } },
            strict: false,
          },
        },
      ]);
      expect(sent.tool_choice).toBe('auto');

      const second = await client.responses.create({
        model: 'mock-model',
        previous_response_id: first.id,
        input: [{ type: 'function_call_output', call_id: call.call_id, output: '{"temp":21}' }],
        tools,
      });
      expect(second.status).toBe('completed');
      expect(second.previous_response_id).toBe(first.id);
      expect(lastBody().messages).toEqual([
        { role: 'user', content: 'weather in Paris?' },
        {
          role: 'assistant',
          content: null,
          tool_calls: [
            {
              id: call.call_id,
              type: 'function',
              function: { name: 'get_weather', arguments: call.arguments },
            },
          ],
        },
        { role: 'tool', tool_call_id: call.call_id, content: '{"temp":21}' },
      ]);
    });

    it('an engine’s reasoning_content becomes a reasoning item before the message', async () => {
      const stream = client.responses.stream(
        { model: 'mock-model', input: 'think' },
        { headers: { 'x-mock-reasoning': '3' } },
      );
      const types: string[] = [];
      for await (const event of stream) types.push(event.type);
      const final = await stream.finalResponse();
      expect(final.output.map((o) => o.type)).toEqual(['reasoning', 'message']);
      const reasoning = final.output[0] as OpenAI.Responses.ResponseReasoningItem;
      expect(reasoning.content?.[0]?.text.trim().split(' ')).toHaveLength(3);
      expect(types.filter((t) => t === 'response.reasoning_text.delta')).toHaveLength(3);
      expect(types).toContain('response.reasoning_text.done');
    });

    it('chains with previous_response_id; instructions are not carried over; unknown ids are 404', async () => {
      const first = await client.responses.create({
        model: 'mock-model',
        input: 'one',
        instructions: 'sys',
        max_output_tokens: 2,
      });
      const second = await client.responses.create({
        model: 'mock-model',
        input: 'two',
        previous_response_id: first.id,
        max_output_tokens: 2,
      });
      await client.responses.create({
        model: 'mock-model',
        input: 'three',
        previous_response_id: second.id,
        max_output_tokens: 2,
      });
      expect(lastBody().messages).toEqual([
        { role: 'user', content: 'one' },
        { role: 'assistant', content: sequence(2) },
        { role: 'user', content: 'two' },
        { role: 'assistant', content: sequence(2) },
        { role: 'user', content: 'three' },
      ]);
      const missing = await post(url(), {
        model: 'mock-model',
        input: 'x',
        previous_response_id: 'resp_nope',
      });
      expect(missing.status).toBe(404);
      expect(missing.json()).toMatchObject({
        error: {
          code: 'previous_response_not_found',
          param: 'previous_response_id',
          type: 'not_found_error',
        },
      });
    });

    it('store=false keeps nothing; delete removes a response', async () => {
      const transient = await client.responses.create({
        model: 'mock-model',
        input: 'x',
        store: false,
        max_output_tokens: 1,
      });
      expect((transient as unknown as { store: boolean }).store).toBe(false);
      expect((await fetch(`${url()}/${transient.id}`)).status).toBe(404);
      const kept = await client.responses.create({ model: 'mock-model', input: 'x', max_output_tokens: 1 });
      await client.responses.delete(kept.id);
      const other = await client.responses.create({ model: 'mock-model', input: 'x', max_output_tokens: 1 });
      const deleted = await fetch(`${url()}/${other.id}`, { method: 'DELETE' });
      expect(await deleted.json()).toEqual({ id: other.id, object: 'response.deleted', deleted: true });
      expect((await fetch(`${url()}/${kept.id}`)).status).toBe(404);
      expect((await fetch(`${url()}/${kept.id}`, { method: 'DELETE' })).status).toBe(404);
    });

    it('lists input items with after, limit and order', async () => {
      const response = await client.responses.create({
        model: 'mock-model',
        max_output_tokens: 1,
        input: [
          { role: 'user', content: 'a' },
          { role: 'assistant', content: 'b' },
          { type: 'message', role: 'user', content: [{ type: 'input_text', text: 'c' }] },
        ],
      });
      const all = await client.responses.inputItems.list(response.id, { order: 'asc' });
      const texts = all.data.map((item) => (item as { content: { text: string }[] }).content[0]!.text);
      expect(texts).toEqual(['a', 'b', 'c']);
      expect(all.data.every((item) => typeof item.id === 'string' && item.id.length > 0)).toBe(true);
      const desc = (await (await fetch(`${url()}/${response.id}/input_items?limit=2`)).json()) as {
        data: { id: string }[];
        has_more: boolean;
        first_id: string;
        last_id: string;
      };
      expect(desc.data.map((d) => d.id)).toEqual([all.data[2]!.id, all.data[1]!.id]);
      expect(desc.has_more).toBe(true);
      const next = (await (
        await fetch(`${url()}/${response.id}/input_items?limit=2&after=${desc.last_id}`)
      ).json()) as {
        data: { id: string }[];
        has_more: boolean;
      };
      expect(next.data.map((d) => d.id)).toEqual([all.data[0]!.id]);
      expect(next.has_more).toBe(false);
      expect((await fetch(`${url()}/${response.id}/input_items?limit=500`)).status).toBe(400);
    });

    it('passes text.format json_schema to the engine as response_format', async () => {
      await client.responses.create({
        model: 'mock-model',
        input: 'json please',
        max_output_tokens: 1,
        text: { format: { type: 'json_schema', name: 'answer', schema: { type: 'object' }, strict: true } },
      });
      expect((lastBody() as unknown as { response_format: unknown }).response_format).toEqual({
        type: 'json_schema',
        json_schema: { name: 'answer', schema: { type: 'object' }, strict: true },
      });
    });

    it('rejects bad requests with OpenAI-shaped errors', async () => {
      const noInput = await post(url(), { model: 'mock-model' });
      expect(noInput.status).toBe(400);
      expect(noInput.json()).toMatchObject({ error: { param: 'input', code: 'missing_required_parameter' } });
      const tool = await post(url(), { model: 'mock-model', input: 'x', tools: [{ type: 'web_search' }] });
      expect(tool.status).toBe(400);
      expect((tool.json() as { error: { param: string } }).error.param).toMatch(/^tools\[0\]/);
      const bg = await post(url(), { model: 'mock-model', input: 'x', background: true, store: false });
      expect(bg.status).toBe(400);
      const model = await post(url(), { model: 'nope', input: 'x' });
      expect(model.status).toBe(404);
      expect((model.json() as { error: { code: string } }).error.code).toBe('model_not_found');
    });

    it('a failure mid-stream: open items closed incomplete, one response.failed, stored byte-identical', async () => {
      const labels = { api: 'responses', model: 'mock-model', reason: 'upstream_closed' };
      const before = await metricOrZero(gateway.url, 'sluice_stream_failures_total', labels);
      const res = await post(
        url(),
        { model: 'mock-model', input: 'x', stream: true },
        { 'x-mock-fault': 'reset_after:3' },
      );
      const events = parseEvents(res.text);
      const types = events.map((e) => e.name);
      expect(types.filter((t) => t === 'response.output_text.delta')).toHaveLength(3);
      expect(types.slice(-4)).toEqual([
        'response.output_text.done',
        'response.content_part.done',
        'response.output_item.done',
        'response.failed',
      ]);
      expect(
        types.filter(
          (t) => t.startsWith('response.') && ['completed', 'failed', 'incomplete'].includes(t.slice(9)),
        ),
      ).toHaveLength(1);
      const failed = events.at(-1)!.event.response as unknown as OpenAI.Responses.Response;
      expect(failed.status).toBe('failed');
      expect(failed.error).toMatchObject({ code: 'request_stream_closed' });
      const message = failed.output[0] as OpenAI.Responses.ResponseOutputMessage;
      expect(message.status).toBe('incomplete');
      expect((message.content[0] as OpenAI.Responses.ResponseOutputText).text).toBe(sequence(3));
      const done = events.find((e) => e.name === 'response.output_item.done')!.event as unknown as {
        item: { status: string };
      };
      expect(done.item.status).toBe('incomplete');
      const stored = await (await fetch(`${url()}/${failed.id}`)).text();
      expect(stored).toBe(terminalResponseText(events.at(-1)!.data));
      expect(await metric(gateway.url, 'sluice_stream_failures_total', labels)).toBe(before + 1);
    });

    it('a tool call cut mid-arguments keeps its partial arguments, closed incomplete', async () => {
      const res = await post(
        url(),
        { model: 'mock-model', input: 'x', stream: true, tools: [{ type: 'function', name: 'get_weather' }] },
        { 'x-mock-tool-call': 'get_weather', 'x-mock-fault': 'reset_after:3' },
      );
      const failed = parseEvents(res.text).at(-1)!.event.response as unknown as OpenAI.Responses.Response;
      const call = failed.output[0] as OpenAI.Responses.ResponseFunctionToolCall;
      expect(call.status).toBe('incomplete');
      expect(call.arguments.length).toBeGreaterThan(0);
      expect('{"city":"Paris","unit":"celsius"}'.startsWith(call.arguments)).toBe(true);
      expect(call.arguments).not.toBe('{"city":"Paris","unit":"celsius"}');
    });

    it('an error before the first token is an HTTP error, and nothing is stored', async () => {
      const kept = await client.responses.create({ model: 'mock-model', input: 'kept' });
      const before = await storedRows(gateway.context.store, 'responses');
      expect(before.map((r) => r.id)).toContain(kept.id); // the read sees what is stored
      const requestId = `pre-first-token-${backend.name}`;
      const error = await client.responses
        .create(
          { model: 'mock-model', input: 'x' },
          { headers: { 'x-mock-fault': 'http_400', 'x-request-id': requestId } },
        )
        .catch((err: unknown) => err);
      expect(error).toBeInstanceOf(APIError);
      expect((error as APIError).status).toBe(400);
      expect(workers[0]!.stats.requestIds).toContain(requestId);
      // Read the store itself: no row was written for this request, not even a failed one.
      const after = await storedRows(gateway.context.store, 'responses');
      expect(after.map((r) => r.id).sort()).toEqual(before.map((r) => r.id).sort());
    });

    it('background: queued at once, polled to completion; cancel aborts the engine', async () => {
      const queued = await client.responses.create({
        model: 'mock-model',
        input: 'x',
        background: true,
        max_output_tokens: 5,
      });
      expect(['queued', 'in_progress']).toContain(queued.status);
      expect(queued.background).toBe(true);
      await eventually(async () => (await client.responses.retrieve(queued.id)).status === 'incomplete');
      const done = await client.responses.retrieve(queued.id);
      expect(done.output_text).toBe(sequence(5));

      const slowWorker = workers[0]!;
      const abortedBefore = slowWorker.stats.aborted;
      const long = await client.responses.create(
        { model: 'mock-model', input: 'x', background: true, max_output_tokens: 100_000 },
        { headers: { 'x-mock-fault': 'delay_first:50' } },
      );
      await eventually(async () => {
        const now = await client.responses.retrieve(long.id);
        return now.status === 'in_progress' && now.output.length > 0;
      });
      const cancelled = await client.responses.cancel(long.id);
      expect(cancelled.status).toBe('cancelled');
      expect((cancelled.output[0] as { status: string }).status).toBe('incomplete');
      await eventually(
        () => slowWorker.stats.aborted === abortedBefore + 1 && slowWorker.stats.inflight === 0,
      );
      expect((await client.responses.retrieve(long.id)).status).toBe('cancelled');
      // Cancelling a finished one answers it as it is; a foreground response cannot be cancelled.
      expect((await client.responses.cancel(done.id)).status).toBe('incomplete');
      const foreground = await client.responses.create({
        model: 'mock-model',
        input: 'x',
        max_output_tokens: 1,
      });
      const notBackground = await post(`${url()}/${foreground.id}/cancel`, {});
      expect(notBackground.status).toBe(400);
    });

    it('conversations: items feed a response, and the response appends its input and output', async () => {
      const conversation = await client.conversations.create({
        metadata: { topic: 'demo' },
        items: [{ type: 'message', role: 'user', content: 'remember 42' }],
      });
      expect(conversation.id).toMatch(/^conv_/);
      expect((await client.conversations.retrieve(conversation.id)).metadata).toEqual({ topic: 'demo' });
      const response = await client.responses.create({
        model: 'mock-model',
        input: 'what number?',
        conversation: conversation.id,
        max_output_tokens: 2,
      });
      expect(response.conversation).toEqual({ id: conversation.id });
      expect(lastBody().messages).toEqual([
        { role: 'user', content: 'remember 42' },
        { role: 'user', content: 'what number?' },
      ]);
      const items = await client.conversations.items.list(conversation.id, { order: 'asc' });
      expect(items.data.map((item) => item.type)).toEqual(['message', 'message', 'message']);
      const ids = items.data.map((item) => item.id);
      expect(ids.at(-1)).toBe(response.output[0]!.id);
      await client.conversations.items.create(conversation.id, {
        items: [{ type: 'message', role: 'user', content: 'more' }],
      });
      const one = await client.conversations.items.retrieve(ids[0]!, { conversation_id: conversation.id });
      expect(one.id).toBe(ids[0]);
      await client.conversations.items.delete(ids[0]!, { conversation_id: conversation.id });
      expect((await client.conversations.items.list(conversation.id)).data).toHaveLength(3);
      await client.conversations.update(conversation.id, { metadata: { topic: 'changed' } });
      expect((await client.conversations.retrieve(conversation.id)).metadata).toEqual({ topic: 'changed' });
      const both = await post(url(), {
        model: 'mock-model',
        input: 'x',
        conversation: conversation.id,
        previous_response_id: response.id,
      });
      expect(both.status).toBe(400);
      await client.conversations.delete(conversation.id);
      expect((await fetch(`${gateway.url}/v1/conversations/${conversation.id}`)).status).toBe(404);
      const unknown = await post(url(), { model: 'mock-model', input: 'x', conversation: 'conv_nope' });
      expect(unknown.status).toBe(404);
      expect((unknown.json() as { error: { code: string } }).error.code).toBe('conversation_not_found');
    });
  });
}
