/** One event of a Responses SSE body. */
export interface ResponseEvent {
  name: string;
  data: string;
  event: {
    type: string;
    sequence_number: number;
    response?: { id: string; status: string; error: { code: string; message: string } | null };
  };
}

/** Parses a Responses SSE body into its events. */
export function responseEvents(text: string): ResponseEvent[] {
  return text
    .split('\n\n')
    .filter((block) => block.trim().length > 0)
    .map((block) => {
      const name = /^event: (.*)$/m.exec(block)?.[1] ?? '';
      const data = /^data: (.*)$/m.exec(block)?.[1] ?? '';
      return { name, data, event: JSON.parse(data) as ResponseEvent['event'] };
    });
}

/** Streams a chat completion and returns its body: it must end with a finish_reason and [DONE]. */
export async function chatStream(baseUrl: string): Promise<string> {
  const response = await fetch(`${baseUrl}/v1/chat/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ model: 'mock-model', messages: [{ role: 'user', content: 'hi' }], stream: true }),
  });
  if (response.status !== 200) throw new Error(`chat stream answered ${response.status}`);
  return response.text();
}
