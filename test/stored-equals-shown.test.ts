import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Gateway } from '../src/gateway.js';
import type { MockWorker } from '../src/mock/mock-worker.js';
import { backends } from './helpers/backends.js';
import { post, startGateway, startMocks } from './helpers/gateway.js';

interface Event {
  type: string;
  sequence_number: number;
  [key: string]: unknown;
}

/** Reads a Responses SSE stream; calls `onEvent` with each event as it arrives. */
async function readStream(
  response: Response,
  onEvent: (event: Event) => Promise<void> | void,
): Promise<string[]> {
  const reader = response.body!.getReader();
  const decoder = new TextDecoder();
  const data: string[] = [];
  let buffer = '';
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    buffer += decoder.decode(value, { stream: true });
    let end = buffer.indexOf('\n\n');
    while (end >= 0) {
      const block = buffer.slice(0, end);
      buffer = buffer.slice(end + 2);
      const line = block.split('\n').find((l) => l.startsWith('data: '));
      if (line) {
        data.push(line.slice(6));
        await onEvent(JSON.parse(line.slice(6)) as Event);
      }
      end = buffer.indexOf('\n\n');
    }
  }
  return data;
}

/** The exact JSON text of the `response` inside a terminal event's data. */
function responseText(data: string): string {
  return data.slice(data.indexOf('"response":') + '"response":'.length, -1);
}

for (const backend of backends()) {
  describe(`what GET returns is what the client saw last (${backend.name})`, () => {
    let workers: MockWorker[];
    let gateway: Gateway;

    beforeAll(async () => {
      workers = await startMocks(1, { tokensPerSecond: 40 });
      gateway = await startGateway({
        workers: workers.map((w) => ({ url: w.url })),
        storage: backend.storage(),
      });
    });
    afterAll(async () => {
      await gateway.close();
      await Promise.all(workers.map((w) => w.close()));
      await backend.cleanup();
    });

    for (const background of [false, true]) {
      it(`a ${background ? 'background' : 'foreground'} response whose conversation append fails ends failed, stored as shown`, async () => {
        const conversation = (await post(`${gateway.url}/v1/conversations`, {})).json() as { id: string };
        const response = await fetch(`${gateway.url}/v1/responses`, {
          method: 'POST',
          headers: { 'content-type': 'application/json' },
          body: JSON.stringify({
            model: 'mock-model',
            input: 'hello',
            conversation: conversation.id,
            max_output_tokens: 8,
            stream: true,
            background,
          }),
        });
        expect(response.status).toBe(200);
        let deleted = false;
        const data = await readStream(response, async (event) => {
          // The conversation goes while the response is being written.
          if (event.type === 'response.output_text.delta' && !deleted) {
            deleted = true;
            const gone = await fetch(`${gateway.url}/v1/conversations/${conversation.id}`, {
              method: 'DELETE',
            });
            expect(gone.status).toBe(200);
          }
        });
        expect(deleted).toBe(true);
        const events = data.map((d) => JSON.parse(d) as Event);
        const last = events.at(-1)!;
        expect(last.type).toBe('response.failed');
        const shown = last.response as {
          id: string;
          status: string;
          completed_at: unknown;
          error: { code: string };
          output: { status: string }[];
        };
        expect(shown).toMatchObject({
          status: 'failed',
          completed_at: null,
          error: { code: 'store_write_failed' },
        });
        expect(shown.output.length).toBeGreaterThan(0);
        for (const item of shown.output) expect(item.status).toBe('incomplete');
        // No item was shown as completed on the way either.
        for (const event of events.filter((e) => e.type === 'response.output_item.done'))
          expect((event.item as { status: string }).status).toBe('incomplete');
        // Contiguous sequence numbers, one terminal event.
        expect(events.map((e) => e.sequence_number)).toEqual(events.map((_, i) => i));
        expect(events.filter((e) => /^response\.(completed|incomplete|failed)$/.test(e.type))).toHaveLength(
          1,
        );
        const got = await fetch(`${gateway.url}/v1/responses/${shown.id}`);
        expect(await got.text()).toBe(responseText(data.at(-1)!));
        // The replay is the stream the client saw.
        const replay = await fetch(`${gateway.url}/v1/responses/${shown.id}?stream=true`);
        expect((await readStream(replay, () => {})).map((d) => JSON.parse(d))).toEqual(events);
      });
    }
  });
}
