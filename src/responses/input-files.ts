import { UnsupportedFileReference, UnsupportedFileType } from '../errors/file-errors.js';
import { InvalidValue, MissingParameter } from '../errors/request-errors.js';
import type { PdfReader } from './pdf-reader.js';

/** An `input_file` content part as a client sends it. */
export interface InputFilePart {
  type: 'input_file';
  file_data?: string | null;
  file_id?: string | null;
  file_url?: string | null;
  filename?: string | null;
}

/** Media types given to the model as text, besides `text/*` and `+json` / `+xml` suffixes. */
const TEXT_MEDIA_TYPES = new Set([
  'application/json',
  'application/ld+json',
  'application/x-ndjson',
  'application/jsonl',
  'application/xml',
  'application/yaml',
  'application/x-yaml',
  'application/toml',
  'application/javascript',
  'application/x-javascript',
  'application/typescript',
  'application/x-typescript',
  'application/x-sh',
  'application/x-python',
  'application/sql',
  'application/graphql',
  'application/x-tex',
  'application/x-latex',
  'application/csv',
  'application/x-httpd-php',
]);

/** File extensions read as text when the media type is absent or generic (application/octet-stream). */
const TEXT_EXTENSIONS: Record<string, string> = {
  txt: 'text/plain',
  text: 'text/plain',
  log: 'text/plain',
  md: 'text/markdown',
  markdown: 'text/markdown',
  rst: 'text/x-rst',
  csv: 'text/csv',
  tsv: 'text/tab-separated-values',
  json: 'application/json',
  jsonl: 'application/jsonl',
  ndjson: 'application/x-ndjson',
  xml: 'application/xml',
  html: 'text/html',
  htm: 'text/html',
  css: 'text/css',
  yaml: 'application/yaml',
  yml: 'application/yaml',
  toml: 'application/toml',
  ini: 'text/plain',
  cfg: 'text/plain',
  conf: 'text/plain',
  env: 'text/plain',
  sql: 'application/sql',
  graphql: 'application/graphql',
  tex: 'application/x-tex',
  js: 'text/javascript',
  mjs: 'text/javascript',
  cjs: 'text/javascript',
  jsx: 'text/javascript',
  ts: 'text/x-typescript',
  tsx: 'text/x-typescript',
  py: 'text/x-python',
  rb: 'text/x-ruby',
  go: 'text/x-go',
  rs: 'text/x-rust',
  java: 'text/x-java',
  kt: 'text/x-kotlin',
  kts: 'text/x-kotlin',
  scala: 'text/x-scala',
  swift: 'text/x-swift',
  c: 'text/x-c',
  h: 'text/x-c',
  cc: 'text/x-c++',
  cpp: 'text/x-c++',
  cxx: 'text/x-c++',
  hpp: 'text/x-c++',
  cs: 'text/x-csharp',
  php: 'text/x-php',
  pl: 'text/x-perl',
  lua: 'text/x-lua',
  r: 'text/x-r',
  sh: 'text/x-shellscript',
  bash: 'text/x-shellscript',
  zsh: 'text/x-shellscript',
  ps1: 'text/plain',
  bat: 'text/plain',
  dockerfile: 'text/plain',
  makefile: 'text/plain',
  vue: 'text/plain',
  svelte: 'text/plain',
  proto: 'text/plain',
  svg: 'image/svg+xml',
  pdf: 'application/pdf',
  png: 'image/png',
  jpg: 'image/jpeg',
  jpeg: 'image/jpeg',
  gif: 'image/gif',
  webp: 'image/webp',
  zip: 'application/zip',
  docx: 'application/vnd.openxmlformats-officedocument.wordprocessingml.document',
  xlsx: 'application/vnd.openxmlformats-officedocument.spreadsheetml.sheet',
  pptx: 'application/vnd.openxmlformats-officedocument.presentationml.presentation',
};

const DATA_URL = /^data:([^;,]*)((?:;[^;,]*)*),/s;

function isTextMedia(media: string): boolean {
  return (
    media.startsWith('text/') ||
    TEXT_MEDIA_TYPES.has(media) ||
    media.endsWith('+json') ||
    media.endsWith('+xml')
  );
}

function extensionOf(filename: string): string {
  const base = filename.slice(filename.lastIndexOf('/') + 1).toLowerCase();
  const dot = base.lastIndexOf('.');
  return dot >= 0 ? base.slice(dot + 1) : base;
}

function unsupported(message: string, param: string): UnsupportedFileType {
  return new UnsupportedFileType(message, param);
}

/**
 * The text the model is given for an `input_file` part: a text-like file (text/*, JSON, XML,
 * CSV, Markdown, YAML, source code; told by its data URL's media type, or by its filename's
 * extension when that type is missing or generic) with a header naming it. Anything else is a
 * 400 naming its media type; `file_id` and `file_url` are 400s (sluice has no Files API and
 * fetches nothing). A PDF is given as its text, read beforehand by `extractPdfTexts`.
 */
export function inputFileText(part: InputFilePart, param = 'input'): string {
  if (part.file_id) {
    throw new UnsupportedFileReference(
      `input_file.file_id '${part.file_id.slice(0, 64)}' cannot be resolved: this gateway has no Files API. Send the file inline as file_data (a data URL such as data:text/plain;base64,...) with its filename.`,
      param,
    );
  }
  if (part.file_url) {
    throw new UnsupportedFileReference(
      'input_file.file_url is not supported: this gateway does not fetch files. Send the file inline as file_data (a data URL such as data:text/plain;base64,...) with its filename.',
      param,
    );
  }
  if (typeof part.file_data !== 'string' || part.file_data.length === 0) {
    throw new MissingParameter(
      'An input_file part needs file_data (a data URL such as data:text/plain;base64,...) and a filename.',
      param,
    );
  }
  const filename = part.filename?.trim() || 'file';
  const match = DATA_URL.exec(part.file_data);
  const declared = (match?.[1] ?? '').trim().toLowerCase();
  const base64 = match ? /;base64/i.test(match[2] ?? '') : true;
  const payload = match ? part.file_data.slice(match[0].length) : part.file_data;
  const guessed = TEXT_EXTENSIONS[extensionOf(filename)];
  const media = declared === '' || declared === 'application/octet-stream' ? (guessed ?? declared) : declared;
  if (media === 'application/pdf') {
    const extracted = pdfTexts.get(part);
    if (extracted === undefined) {
      // extractPdfTexts runs before translation; a PDF it did not see is a bug, said plainly.
      throw unsupported(`The PDF '${filename}' was not read before translation.`, param);
    }
    return `--- file: ${filename} (application/pdf, text extracted) ---\n${extracted}\n--- end of file: ${filename} ---`;
  }
  if (!isTextMedia(media)) {
    throw unsupported(
      `Unsupported file type '${media || 'unknown'}' ('${filename}'): only text files are supported (text/*, JSON, XML, CSV, Markdown, YAML, source code).`,
      param,
    );
  }
  let bytes: Buffer;
  try {
    bytes = base64 ? Buffer.from(payload, 'base64') : Buffer.from(decodeURIComponent(payload), 'utf8');
  } catch {
    throw new InvalidValue(`The file_data of '${filename}' is not a valid data URL.`, param);
  }
  let text: string;
  try {
    text = new TextDecoder('utf-8', { fatal: true }).decode(bytes);
  } catch {
    throw unsupported(
      `The file '${filename}' (${media}) is not valid UTF-8 text; only text files are supported.`,
      param,
    );
  }
  return `--- file: ${filename} (${media}) ---\n${text}\n--- end of file: ${filename} ---`;
}

/** The text of each PDF part, read by extractPdfTexts before the (synchronous) translation. */
const pdfTexts = new WeakMap<object, string>();

/**
 * Reads the text of every PDF `input_file` part among `items` (messages with content parts)
 * with `reader` (pdf.js in a bounded process; one file read once, by its content). A PDF that
 * cannot be read, holds no text (a scan) or passes the reader's bounds is a 400 naming the file.
 */
export async function extractPdfTexts(
  reader: PdfReader,
  items: readonly unknown[],
  param = 'input',
): Promise<void> {
  for (const item of items) {
    const content = (item as { content?: unknown } | null)?.content;
    if (!Array.isArray(content)) continue;
    for (const part of content as InputFilePart[]) {
      if (part?.type !== 'input_file' || typeof part.file_data !== 'string' || pdfTexts.has(part)) continue;
      const match = DATA_URL.exec(part.file_data);
      const filename = part.filename?.trim() || 'file';
      const declared = (match?.[1] ?? '').trim().toLowerCase();
      const guessed = extensionOf(filename) === 'pdf' ? 'application/pdf' : undefined;
      const media =
        declared === '' || declared === 'application/octet-stream' ? (guessed ?? declared) : declared;
      if (media !== 'application/pdf') continue;
      const payload = match ? part.file_data.slice(match[0].length) : part.file_data;
      pdfTexts.set(part, await reader.text(Buffer.from(payload, 'base64'), filename, param));
    }
  }
}
