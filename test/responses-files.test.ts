import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Gateway } from '../src/gateway.js';
import type { MockWorker } from '../src/mock/mock-worker.js';
import { post, startGateway, startMocks } from './helpers/gateway.js';

import { minimalPdf } from './helpers/pdf.js';

const dataUrl = (media: string, text: string | Buffer) =>
  `data:${media};base64,${Buffer.from(text).toString('base64')}`;

describe('input_file content parts', () => {
  let worker: MockWorker;
  let gateway: Gateway;
  const last = () =>
    (worker.stats.lastBodies.at(-1) as { messages: { role: string; content: unknown }[] }).messages;
  const send = (parts: unknown[]) =>
    post(`${gateway.url}/v1/responses`, {
      model: 'mock-model',
      input: [{ role: 'user', content: parts }],
    });

  beforeAll(async () => {
    [worker] = (await startMocks(1)) as [MockWorker];
    gateway = await startGateway({ workers: [{ url: worker.url }] });
  });
  afterAll(async () => {
    await gateway.close();
    await worker.close();
  });

  it('gives a text file to the model as text, under a header naming it', async () => {
    const res = await send([
      { type: 'input_text', text: 'Summarise this.' },
      { type: 'input_file', filename: 'notes.txt', file_data: dataUrl('text/plain', 'line one\nline two') },
    ]);
    expect(res.status).toBe(200);
    expect(last()).toEqual([
      {
        role: 'user',
        content:
          'Summarise this.\n\n--- file: notes.txt (text/plain) ---\nline one\nline two\n--- end of file: notes.txt ---',
      },
    ]);
    // The stored input keeps the file part as sent.
    const id = (res.json() as { id: string }).id;
    const items = (await (await fetch(`${gateway.url}/v1/responses/${id}/input_items`)).json()) as {
      data: { content: { type: string }[] }[];
    };
    expect(items.data[0]!.content.map((p) => p.type)).toEqual(['input_text', 'input_file']);
  });

  it('reads JSON, CSV, YAML, Markdown and source code, by media type or by extension', async () => {
    const cases: [string, string, string][] = [
      ['data.json', 'application/json', 'application/json'],
      ['table.csv', 'text/csv', 'text/csv'],
      ['config.yaml', 'application/x-yaml', 'application/x-yaml'],
      ['README.md', 'application/octet-stream', 'text/markdown'],
      ['main.py', '', 'text/x-python'],
      ['feed.atom', 'application/atom+xml', 'application/atom+xml'],
    ];
    for (const [filename, declared, shown] of cases) {
      const res = await send([{ type: 'input_file', filename, file_data: dataUrl(declared, 'x = 1 ü') }]);
      expect(res.status, filename).toBe(200);
      expect(last()[0]!.content).toBe(
        `--- file: ${filename} (${shown}) ---\nx = 1 ü\n--- end of file: ${filename} ---`,
      );
    }
    // Plain (not base64) data URLs and images beside files.
    const res = await send([
      { type: 'input_file', filename: 'a.txt', file_data: 'data:text/plain,hello%20there' },
      { type: 'input_image', image_url: 'data:image/png;base64,AAAA' },
    ]);
    expect(res.status).toBe(200);
    expect(last()[0]!.content).toEqual([
      { type: 'text', text: '--- file: a.txt (text/plain) ---\nhello there\n--- end of file: a.txt ---' },
      { type: 'image_url', image_url: { url: 'data:image/png;base64,AAAA' } },
    ]);
  });

  it('reads files in developer messages and function call outputs too', async () => {
    const file = {
      type: 'input_file',
      filename: 'rules.md',
      file_data: dataUrl('text/markdown', '# be kind'),
    };
    const res = await post(`${gateway.url}/v1/responses`, {
      model: 'mock-model',
      input: [
        { role: 'developer', content: [file] },
        { type: 'function_call', call_id: 'c1', name: 'read', arguments: '{}' },
        { type: 'function_call_output', call_id: 'c1', output: [file] },
      ],
    });
    expect(res.status).toBe(200);
    const text = '--- file: rules.md (text/markdown) ---\n# be kind\n--- end of file: rules.md ---';
    expect(last()[0]).toEqual({ role: 'system', content: text });
    expect(last()[2]).toEqual({ role: 'tool', tool_call_id: 'c1', content: text });
  });

  it('gives a PDF to the model as its extracted text, page by page', async () => {
    const pdf = minimalPdf(['Quarterly report (draft)', 'Revenue grew by 12 percent']);
    const res = await send([
      { type: 'input_text', text: 'Summarise:' },
      { type: 'input_file', filename: 'report.pdf', file_data: dataUrl('application/pdf', pdf) },
    ]);
    expect(res.status).toBe(200);
    const content = JSON.stringify(last());
    expect(content).toContain('--- file: report.pdf (application/pdf, text extracted) ---');
    expect(content).toContain('Quarterly report (draft)\\nRevenue grew by 12 percent');
    // Told by its extension when the data URL has no media type.
    const byName = await send([{ type: 'input_file', filename: 'report.pdf', file_data: dataUrl('', pdf) }]);
    expect(byName.status).toBe(200);
  });

  it('refuses broken PDFs, other binary types and non-UTF-8 text with a 400 naming the file or media type', async () => {
    const requests = worker.stats.requests;
    const pdf = await send([
      { type: 'input_file', filename: 'paper.pdf', file_data: dataUrl('application/pdf', '%PDF-1.7') },
    ]);
    expect(pdf.status).toBe(400);
    expect(pdf.json()).toMatchObject({ error: { code: 'invalid_file', type: 'invalid_request_error' } });
    expect((pdf.json() as { error: { message: string } }).error.message).toContain(
      "The PDF 'paper.pdf' could not be read",
    );
    const png = await send([
      { type: 'input_file', filename: 'x.png', file_data: dataUrl('image/png', 'png') },
    ]);
    expect(png.status).toBe(400);
    expect((png.json() as { error: { message: string } }).error.message).toContain(
      "Unsupported file type 'image/png'",
    );
    const zip = await send([
      { type: 'input_file', filename: 'x.bin', file_data: dataUrl('application/zip', 'PK') },
    ]);
    expect((zip.json() as { error: { message: string } }).error.message).toContain("'application/zip'");
    const latin1 = await send([
      {
        type: 'input_file',
        filename: 'old.txt',
        file_data: dataUrl('text/plain', Buffer.from([0x63, 0xe9, 0xff])),
      },
    ]);
    expect(latin1.status).toBe(400);
    expect(latin1.json()).toMatchObject({ error: { code: 'unsupported_file_type' } });
    // Nothing reached the engine.
    expect(worker.stats.requests).toBe(requests);
  });

  it('says clearly that file_id and file_url cannot be resolved', async () => {
    const byId = await send([{ type: 'input_file', file_id: 'file-abc123' }]);
    expect(byId.status).toBe(400);
    expect(byId.json()).toMatchObject({ error: { code: 'unsupported_file_reference' } });
    expect((byId.json() as { error: { message: string } }).error.message).toContain('no Files API');
    const byUrl = await send([{ type: 'input_file', file_url: 'https://example.com/a.txt' }]);
    expect(byUrl.status).toBe(400);
    expect((byUrl.json() as { error: { message: string } }).error.message).toContain('does not fetch');
    const empty = await send([{ type: 'input_file', filename: 'a.txt' }]);
    expect(empty.status).toBe(400);
    expect(empty.json()).toMatchObject({ error: { code: 'missing_required_parameter' } });
  });
});
