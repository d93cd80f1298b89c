import { describe, expect, it } from 'vitest';
import { chatBody, sseData, startGateway, startMocks } from './helpers/gateway.js';

describe('graceful shutdown', () => {
  it('lets short streams finish, ends long ones with dispatcher_closed, and refuses new requests', async () => {
    const [worker] = await startMocks(1, { tokensPerSecond: 50 });
    const gateway = await startGateway({ workers: [{ url: worker!.url }] });
    const url = `${gateway.url}/v1/chat/completions`;
    const open = (maxTokens: number) =>
      fetch(url, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify(chatBody({ stream: true, max_tokens: maxTokens })),
      });
    const short = await open(5); // ~100 ms
    const long = await open(1000); // ~20 s
    const shortText = short.text();
    const longText = long.text();
    const shutdown = gateway.shutdown(400);
    await new Promise((resolve) => setTimeout(resolve, 50));
    // A new connection is refused; one kept alive from before gets a 503 and is closed.
    const late = await fetch(url, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: '{}',
    }).catch(() => undefined);
    if (late) {
      expect(late.status).toBe(503);
      expect(late.headers.get('connection')).toBe('close');
    }
    expect(sseData(await shortText).at(-1)).toBe('[DONE]');
    const events = sseData(await longText);
    const last = JSON.parse(events.at(-1)!) as { error: { code: string; type: string } };
    expect(last.error.code).toBe('dispatcher_closed');
    expect(last.error.type).toBe('server_error');
    expect(events).not.toContain('[DONE]');
    await shutdown;
    await worker!.close();
    expect(worker!.stats.inflight).toBe(0);
  });
});
