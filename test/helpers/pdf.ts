import { Readable, Writable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { createDeflate } from 'node:zlib';

/**
 * A minimal, valid PDF (one page per string, Helvetica text), written by hand with a correct
 * cross-reference table: a fixture for the `input_file` tests, with no binary file in the repo.
 */
export function minimalPdf(pages: readonly string[]): Buffer {
  const objects: string[] = [];
  const pageIds = pages.map((_, i) => 4 + i * 2);
  const fontId = 4 + pages.length * 2;
  objects.push('<< /Type /Catalog /Pages 2 0 R >>');
  objects.push(
    `<< /Type /Pages /Kids [${pageIds.map((id) => `${id} 0 R`).join(' ')}] /Count ${pages.length} >>`,
  );
  objects.push('<< /Producer (sluice tests) >>');
  pages.forEach((text, i) => {
    const escaped = text.replace(/[\\()]/g, (c) => `\\${c}`);
    const stream = `BT /F1 18 Tf 72 700 Td (${escaped}) Tj ET`;
    objects.push(
      `<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents ${pageIds[i]! + 1} 0 R /Resources << /Font << /F1 ${fontId} 0 R >> >> >>`,
    );
    objects.push(`<< /Length ${stream.length} >>\nstream\n${stream}\nendstream`);
  });
  objects.push('<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>');
  let body = '%PDF-1.4\n';
  const offsets: number[] = [];
  objects.forEach((object, i) => {
    offsets.push(body.length);
    body += `${i + 1} 0 obj\n${object}\nendobj\n`;
  });
  const xref = body.length;
  body += `xref\n0 ${objects.length + 1}\n0000000000 65535 f \n`;
  for (const offset of offsets) body += `${String(offset).padStart(10, '0')} 00000 n \n`;
  body += `trailer\n<< /Size ${objects.length + 1} /Root 1 0 R /Info 3 0 R >>\nstartxref\n${xref}\n%%EOF\n`;
  return Buffer.from(body, 'latin1');
}

/**
 * A one-page PDF whose content stream is `repeat` copies of `content` (between `before` and
 * `after`), FlateDecode-compressed (zlib deflate): a fixture for PDFs built to be hard to read.
 * The stream is deflated as it is made, so one that inflates to hundreds of MB never is held whole.
 */
export async function flatePdf(content: string, repeat = 1, before = '', after = ''): Promise<Buffer> {
  const piece = Buffer.from(content, 'latin1');
  const chunks: Buffer[] = [];
  await pipeline(
    Readable.from(
      (function* () {
        if (before) yield Buffer.from(before, 'latin1');
        for (let i = 0; i < repeat; i++) yield piece;
        if (after) yield Buffer.from(after, 'latin1');
      })(),
    ),
    createDeflate({ level: 9 }),
    new Writable({
      write(chunk: Buffer, _encoding, done) {
        chunks.push(chunk);
        done();
      },
    }),
  );
  const stream = Buffer.concat(chunks);
  const parts: Buffer[] = [];
  const offsets: number[] = [];
  let length = 0;
  const add = (buffer: Buffer | string) => {
    const bytes = typeof buffer === 'string' ? Buffer.from(buffer, 'latin1') : buffer;
    parts.push(bytes);
    length += bytes.length;
  };
  add('%PDF-1.4\n');
  const objects = [
    '<< /Type /Catalog /Pages 2 0 R >>',
    '<< /Type /Pages /Kids [3 0 R] /Count 1 >>',
    '<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 4 0 R /Resources << /Font << /F1 5 0 R >> >> >>',
    stream,
    '<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>',
  ];
  objects.forEach((object, i) => {
    offsets.push(length);
    add(`${i + 1} 0 obj\n`);
    if (typeof object === 'string') add(object);
    else {
      add(`<< /Length ${object.length} /Filter /FlateDecode >>\nstream\n`);
      add(object);
      add('\nendstream');
    }
    add('\nendobj\n');
  });
  const xref = length;
  add(`xref\n0 ${objects.length + 1}\n0000000000 65535 f \n`);
  for (const offset of offsets) add(`${String(offset).padStart(10, '0')} 00000 n \n`);
  add(`trailer\n<< /Size ${objects.length + 1} /Root 1 0 R >>\nstartxref\n${xref}\n%%EOF\n`);
  return Buffer.concat(parts);
}
