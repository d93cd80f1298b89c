import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Gateway } from '../src/gateway.js';
import type { MockWorker } from '../src/mock/mock-worker.js';
import { metric, metricOrZero, perTest, post, startGateway, startMocks } from './helpers/gateway.js';
import { flatePdf, minimalPdf } from './helpers/pdf.js';

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

/**
 * Polls the gateway's /health one request after another, `everyMs` apart, until stopped: how
 * many were answered, and the highest RSS of this process (the gateway runs in it) meanwhile.
 */
function pollHealth(url: string, everyMs = 20) {
  let stopped = false;
  let answered = 0;
  let peakRss = process.memoryUsage().rss;
  const sampler = setInterval(() => {
    peakRss = Math.max(peakRss, process.memoryUsage().rss);
  }, 5);
  const loop = (async () => {
    while (!stopped) {
      const res = await fetch(`${url}/health`);
      await res.arrayBuffer();
      answered++;
      await new Promise((resolve) => setTimeout(resolve, everyMs));
    }
  })();
  return {
    get answered() {
      return answered;
    },
    async stop() {
      stopped = true;
      await loop;
      clearInterval(sampler);
      return { answered, peakRss };
    },
  };
}

/** How long one /health poll of `pollHealth` takes, interval included, on an idle gateway (ms). */
async function healthPollPeriod(url: string): Promise<number> {
  const polls = pollHealth(url);
  const started = performance.now();
  while (polls.answered < 20) await new Promise((resolve) => setTimeout(resolve, 5));
  const { answered } = await polls.stop();
  return (performance.now() - started) / answered;
}

describe('PDFs built to be hard to read', () => {
  const fx = perTest();
  const MB = 1024 * 1024;

  async function setup(pdf: Record<string, number>) {
    const [worker] = (await fx.mocks(1)) as [MockWorker];
    const gateway = await fx.gateway({ workers: [{ url: worker.url }], files: { pdf } });
    return { worker, gateway };
  }
  const sendPdf = (gateway: Gateway, pdf: Buffer, filename: string, extra: Record<string, unknown> = {}) =>
    post(`${gateway.url}/v1/responses`, {
      model: 'mock-model',
      input: [
        {
          role: 'user',
          content: [
            { type: 'input_text', text: 'Read this.' },
            { type: 'input_file', filename, file_data: dataUrl('application/pdf', pdf) },
          ],
        },
      ],
      ...extra,
    });

  it('refuses a small PDF whose content stream inflates to 200 MB (400 file_too_complex), /health answering and memory bounded meanwhile', async () => {
    const { worker, gateway } = await setup({ maxMemoryMb: 32, timeoutMs: 60_000 });
    const inflated = 200 * MB;
    const bomb = await flatePdf(' '.repeat(MB), inflated / MB);
    expect(bomb.length).toBeLessThan(inflated / 200);
    // Baselines: this process's memory (the gateway runs in it) at its highest while a normal
    // PDF is read, and how often /health answers an idle gateway.
    const warm = pollHealth(gateway.url);
    const fine = await sendPdf(gateway, minimalPdf(['warm up']), 'fine.pdf');
    expect(fine.status, fine.text).toBe(200);
    const normal = (await warm.stop()).peakRss;
    const period = await healthPollPeriod(gateway.url);
    const polls = pollHealth(gateway.url);
    const started = performance.now();
    const res = await sendPdf(gateway, bomb, 'bomb.pdf');
    const took = performance.now() - started;
    const { answered, peakRss } = await polls.stop();
    expect(res.status).toBe(400);
    expect(res.json()).toMatchObject({
      error: { code: 'file_too_complex', type: 'invalid_request_error', param: 'input' },
    });
    expect((res.json() as { error: { message: string } }).error.message).toContain(
      "The PDF 'bomb.pdf' is too complex to read: reading it takes more than 32 MB of memory",
    );
    // /health was answered throughout, at least half as often as when idle.
    expect(answered).toBeGreaterThanOrEqual((0.5 * took) / period);
    // The gateway's memory never grew by the inflated size, nor by half of it, beyond what
    // reading a normal PDF takes (a thread of its own: about 40 MB).
    expect(peakRss - normal).toBeLessThan(inflated / 2);
    expect(await metric(gateway.url, 'sluice_pdf_parses_total', { outcome: 'memory' })).toBe(1);
    expect(worker.stats.requests).toBe(1);
    // Sent again, the refusal is known by the file's hash: not read again.
    const again = await sendPdf(gateway, bomb, 'bomb-again.pdf');
    expect(again.json()).toMatchObject({ error: { code: 'file_too_complex' } });
    expect(await metric(gateway.url, 'sluice_pdf_parses_total', { outcome: 'memory' })).toBe(1);
    // The gateway reads PDFs as before.
    expect((await sendPdf(gateway, minimalPdf(['still fine']), 'after.pdf')).status).toBe(200);
  }, 60_000);

  it('refuses a valid PDF of one 30 MB text string (400 file_too_complex): its reader dies of it, the gateway does not', async () => {
    // pdf.js holds a string's characters in an array as it lexes it (8 bytes each): growing it
    // near the heap's limit, V8 aborted the whole process when the reader was a worker thread.
    const { worker, gateway } = await setup({ maxMemoryMb: 96, timeoutMs: 60_000 });
    const text = await flatePdf('word '.repeat(MB / 5), 30, 'BT /F1 12 Tf 72 700 Td (', ') Tj ET');
    expect(text.length).toBeLessThan(MB);
    const res = await sendPdf(gateway, text, 'text.pdf');
    expect(res.status).toBe(400);
    expect(res.json()).toMatchObject({
      error: { code: 'file_too_complex', type: 'invalid_request_error', param: 'input' },
    });
    expect((res.json() as { error: { message: string } }).error.message).toContain(
      'more than 96 MB of memory',
    );
    expect(await metric(gateway.url, 'sluice_pdf_parses_total', { outcome: 'memory' })).toBe(1);
    expect(worker.stats.requests).toBe(0);
    // The gateway answers, and reads PDFs as before.
    expect((await fetch(`${gateway.url}/health`)).status).toBe(200);
    expect((await sendPdf(gateway, minimalPdf(['after the big one']), 'after.pdf')).status).toBe(200);
  }, 60_000);

  it('refuses a one-page PDF of millions of text operators past files.pdf.timeoutMs, /health answering meanwhile', async () => {
    const { worker, gateway } = await setup({ timeoutMs: 1_500 });
    const pdf = await flatePdf(`BT /F1 1 Tf ${'(a) Tj '.repeat(100_000)}`, 60);
    const period = await healthPollPeriod(gateway.url);
    const polls = pollHealth(gateway.url);
    const started = performance.now();
    const res = await sendPdf(gateway, pdf, 'operators.pdf');
    const took = performance.now() - started;
    const { answered } = await polls.stop();
    expect(res.status).toBe(400);
    expect(res.json()).toMatchObject({ error: { code: 'file_too_complex', param: 'input' } });
    expect((res.json() as { error: { message: string } }).error.message).toContain(
      'reading it takes longer than 1500 ms',
    );
    // /health was answered throughout, at least half as often as when idle.
    expect(answered).toBeGreaterThanOrEqual((0.5 * took) / period);
    expect(await metric(gateway.url, 'sluice_pdf_parses_total', { outcome: 'time' })).toBe(1);
    expect(worker.stats.requests).toBe(0);
    // The gateway reads PDFs as before.
    expect((await sendPdf(gateway, minimalPdf(['next']), 'next.pdf')).status).toBe(200);
  }, 60_000);

  it('reads a PDF once across a chain of responses (previous_response_id), by its content hash, and once for requests sending it at once', async () => {
    const { worker, gateway } = await setup({});
    const pdf = minimalPdf(['Chapter one', 'Chapter two']);
    const first = await sendPdf(gateway, pdf, 'book.pdf');
    expect(first.status).toBe(200);
    let previous = (first.json() as { id: string }).id;
    for (let turn = 0; turn < 3; turn++) {
      const res = await post(`${gateway.url}/v1/responses`, {
        model: 'mock-model',
        input: `question ${turn}`,
        previous_response_id: previous,
      });
      expect(res.status).toBe(200);
      previous = (res.json() as { id: string }).id;
    }
    // Every turn gave the engine the PDF's text...
    expect(JSON.stringify(worker.stats.lastBodies.at(-1))).toContain('Chapter one\\nChapter two');
    // ...read on one thread, once; the three later turns found it by its hash.
    expect(await metric(gateway.url, 'sluice_pdf_parses_total', { outcome: 'text' })).toBe(1);
    expect(await metric(gateway.url, 'sluice_pdf_cache_hits_total')).toBe(3);
    // Known by its bytes, not its name.
    expect((await sendPdf(gateway, pdf, 'copy.pdf')).status).toBe(200);
    expect(await metric(gateway.url, 'sluice_pdf_parses_total', { outcome: 'text' })).toBe(1);
    // A new PDF sent by two requests at once is read once for both.
    const appendix = minimalPdf(['Appendix']);
    const both = await Promise.all([
      sendPdf(gateway, appendix, 'a.pdf'),
      sendPdf(gateway, appendix, 'b.pdf'),
    ]);
    expect(both.map((r) => r.status)).toEqual([200, 200]);
    expect(JSON.stringify(worker.stats.lastBodies.at(-1))).toContain('Appendix');
    expect(await metric(gateway.url, 'sluice_pdf_parses_total', { outcome: 'text' })).toBe(2);
  });

  it('bounds the PDFs waiting for a thread: past files.pdf.maxQueued a request is refused (503 file_parser_busy)', async () => {
    const { gateway } = await setup({ concurrency: 1, maxQueued: 1, timeoutMs: 1_000 });
    const slow = (n: number) => flatePdf(`BT /F1 1 Tf (${n}) Tj ${'(a) Tj '.repeat(100_000)}`, 60);
    const pdfs = await Promise.all([slow(1), slow(2), slow(3)]);
    const answers = await Promise.all(pdfs.map((pdf, i) => sendPdf(gateway, pdf, `slow${i}.pdf`)));
    const codes = answers.map((r) => (r.json() as { error: { code: string } }).error.code).sort();
    expect(codes).toEqual(['file_parser_busy', 'file_too_complex', 'file_too_complex']);
    const busy = answers.find((r) => r.status === 503)!;
    expect(busy.headers.get('retry-after')).toBe('1');
    expect(await metricOrZero(gateway.url, 'sluice_pdf_parses_total', { outcome: 'time' })).toBe(2);
  }, 30_000);
});
