/**
 * What a name a worker reports may be: a model its `/v1/models` lists, a LoRA adapter its
 * `/metrics` names. Such a name becomes a model clients ask for, a header value, a metric label,
 * a log field and a dashboard row, so it is held to one rule, here, wherever it enters (discovery,
 * the signal scraper): at most MAX_REPORTED_NAME_BYTES bytes of UTF-8, well-formed Unicode (no
 * lone surrogate), and no control character (C0, DEL, C1), line or paragraph separator, or
 * bidirectional override (text that rewrites a log line or a dashboard row). Any other character
 * is fine: `模型-lora` is a name like `llama`. A name that fails is dropped, never served.
 */

/** The longest name believed, in bytes of UTF-8 (Hugging Face ids are at most 96 characters). */
export const MAX_REPORTED_NAME_BYTES = 256;

/** Why a name is refused. */
export type NameFault = 'empty' | 'too_long' | 'not_unicode' | 'control_character';

/** Lone surrogates (`\p{Cs}` under `u` matches only unpaired ones). */
const LONE_SURROGATE = /\p{Cs}/u;
/** C0, DEL, C1 (`\p{Cc}`), U+2028/U+2029, and the bidirectional embeddings, overrides and isolates. */
const CONTROL = /[\p{Cc}\u2028\u2029\u202A-\u202E\u2066-\u2069]/u;

/** What is wrong with `name` as a worker's name; undefined when it may be served. */
export function nameFault(name: string): NameFault | undefined {
  if (name.length === 0) return 'empty';
  // A UTF-16 unit is at least one byte of UTF-8: a longer string is too long without counting.
  if (name.length > MAX_REPORTED_NAME_BYTES || Buffer.byteLength(name, 'utf8') > MAX_REPORTED_NAME_BYTES)
    return 'too_long';
  if (LONE_SURROGATE.test(name)) return 'not_unicode';
  if (CONTROL.test(name)) return 'control_character';
  return undefined;
}

/** A name refused, for a log line. */
export interface RefusedName {
  /** The name made safe to log (see `loggableName`). */
  readonly name: string;
  readonly fault: NameFault;
}

/** Names refused from one source: the first few (made safe to log), and how many in all. */
export class RefusedNames {
  readonly names: RefusedName[] = [];
  count = 0;

  note(name: string, fault: NameFault): void {
    if (this.count++ < LOGGED_NAMES) this.names.push({ name: loggableName(name), fault });
  }
}

/** The names of `names` that pass, in order, and those refused. */
export function screenNames(names: Iterable<string>): { accepted: string[]; refused: RefusedNames } {
  const accepted: string[] = [];
  const refused = new RefusedNames();
  for (const name of names) {
    const fault = nameFault(name);
    if (fault === undefined) accepted.push(name);
    else refused.note(name, fault);
  }
  return { accepted, refused };
}

/** Refused names quoted in one log line. */
const LOGGED_NAMES = 5;
/** Characters of a refused name quoted. */
const LOGGED_CHARS = 64;

/**
 * A name as a log line may quote it: its first LOGGED_CHARS code points as a JSON string
 * (control characters and lone surrogates escaped), so that it cannot end or forge a line.
 */
export function loggableName(name: string): string {
  const points = Array.from(name.slice(0, LOGGED_CHARS * 2)).slice(0, LOGGED_CHARS);
  const cut = points.join('');
  // JSON escapes C0 and lone surrogates; DEL, C1 and the separators and overrides it keeps.
  return JSON.stringify(cut.length < name.length ? `${cut}…` : cut).replace(
    /[\u007f-\u009f\u2028\u2029\u202A-\u202E\u2066-\u2069]/g,
    (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, '0')}`,
  );
}
