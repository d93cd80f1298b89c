/**
 * The mock's deterministic output. Token i of the endless sequence is ` <WORDS[i mod 24]>` (a
 * leading space, one word), so tests can predict text: 3 tokens are " the quick brown".
 *
 * Continuation (mid-stream resume): generation normally starts at token 0, but it picks up where
 * a given partial text left off when that text is part of the sequence:
 * - chat with `continue_final_message: true`, `add_generation_prompt: false` and a final
 *   assistant message: when that message's text is a prefix of the sequence (it may end inside a
 *   token: " the qu" continues with "ick", " brown", ...);
 * - completions: when the prompt ends with the first k tokens of the sequence (a resumed
 *   completion sends the original prompt followed by the partial output), generation starts at
 *   token k. A prompt that happens to end with " the" therefore continues with " quick".
 * So a request resumed with the text received so far and `max_tokens` reduced by the tokens
 * received yields, appended, the same final text and finish_reason as an uninterrupted one.
 */
const WORDS = [
  'the',
  'quick',
  'brown',
  'fox',
  'jumps',
  'over',
  'a',
  'lazy',
  'dog',
  'while',
  'seven',
  'silver',
  'rivers',
  'carry',
  'light',
  'toward',
  'distant',
  'harbors',
  'and',
  'every',
  'lantern',
  'hums',
  'softly',
  'tonight',
] as const;

const TOKENS: readonly string[] = WORDS.map((w) => ` ${w}`);
const TOKEN_JSON: readonly string[] = TOKENS.map((t) => JSON.stringify(t));
const INDEX_OF = new Map<string, number>(TOKENS.map((t, i) => [t, i]));

/** Token i of the sequence. */
export function token(i: number): string {
  return TOKENS[i % TOKENS.length]!;
}

/** `JSON.stringify(token(i))`, pre-built. */
export function tokenJson(i: number): string {
  return TOKEN_JSON[i % TOKENS.length]!;
}

/** `count` tokens back to back, from token `from`. */
export function sequence(count: number, from = 0): string {
  let out = '';
  for (let i = 0; i < count; i++) out += token(from + i);
  return out;
}

/** Where generation starts: at token `index`, of which `offset` characters are already written. */
export interface Start {
  index: number;
  offset: number;
}

export const FROM_START: Readonly<Start> = Object.freeze({ index: 0, offset: 0 });

/** Where to continue when `text` is a prefix of the sequence (possibly ending inside a token), else undefined. */
export function continuePrefix(text: string): Start | undefined {
  let pos = 0;
  let index = 0;
  while (pos < text.length) {
    const t = token(index);
    if (text.startsWith(t, pos)) {
      pos += t.length;
      index++;
      continue;
    }
    const rest = text.slice(pos);
    return t.startsWith(rest) ? { index, offset: rest.length } : undefined;
  }
  return { index, offset: 0 };
}

/** k when `text` ends with the first k >= 1 tokens of the sequence (the largest such k), else undefined. */
export function continueSuffix(text: string): Start | undefined {
  let end = text.length;
  let best = 0;
  let matched = 0;
  let expected = -1;
  while (end > 0) {
    const space = text.lastIndexOf(' ', end - 1);
    if (space < 0) break;
    const index = INDEX_OF.get(text.slice(space, end));
    if (index === undefined || (expected >= 0 && index !== expected)) break;
    matched++;
    if (index === 0) best = matched;
    expected = (index + TOKENS.length - 1) % TOKENS.length;
    end = space;
  }
  return best > 0 ? { index: best, offset: 0 } : undefined;
}

/** A rough token count: whitespace-separated words. */
export function countWords(text: string): number {
  let count = 0;
  let inWord = false;
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    const space = c === 32 || (c >= 9 && c <= 13);
    if (!space && !inWord) count++;
    inWord = !space;
  }
  return count;
}

export type FinishReason = 'stop' | 'length';

/**
 * The content one choice generates: `maxTokens` tokens from `start` (or `defaultTokens`, then
 * finishing "stop"), cut before the first stop string found. Pieces are computed on demand, so
 * a long stream holds no text unless stop strings make it necessary.
 */
export class Completion {
  /** Tokens generated, including one a stop string cut short. */
  readonly generated: number;
  /** Content chunks to emit: `generated`, less one when a stop string leaves its token empty. */
  readonly pieces: number;
  readonly finishReason: FinishReason;
  /** The last piece when a stop string cut it short. */
  private readonly lastPiece: string | undefined;

  constructor(
    private readonly start: Start,
    maxTokens: number | undefined,
    defaultTokens: number,
    stops: readonly string[],
  ) {
    const count = maxTokens ?? defaultTokens;
    let finishReason: FinishReason = maxTokens !== undefined ? 'length' : 'stop';
    let generated = count;
    let pieces = count;
    let lastPiece: string | undefined;
    const active = stops.filter((s) => s.length > 0);
    if (active.length > 0) {
      let text = '';
      for (let i = 0; i < count; i++) {
        const piece = this.rawPiece(i);
        const from = text.length;
        text += piece;
        let cut = -1;
        for (const stop of active) {
          const at = text.indexOf(stop, Math.max(0, from - stop.length + 1));
          if (at >= 0 && (cut < 0 || at < cut)) cut = at;
        }
        if (cut >= 0) {
          finishReason = 'stop';
          generated = i + 1;
          // The stop string may start in an earlier piece: drop whole pieces back to the cut.
          let pieceStart = from;
          let last = i;
          while (pieceStart > cut && last > 0) {
            last--;
            pieceStart -= this.rawPiece(last).length;
          }
          const kept = this.rawPiece(last).slice(0, cut - pieceStart);
          pieces = kept.length > 0 ? last + 1 : last;
          lastPiece = kept.length > 0 ? kept : undefined;
          break;
        }
      }
    }
    this.generated = generated;
    this.pieces = pieces;
    this.finishReason = finishReason;
    this.lastPiece = lastPiece;
  }

  private rawPiece(i: number): string {
    const t = token(this.start.index + i);
    return i === 0 && this.start.offset > 0 ? t.slice(this.start.offset) : t;
  }

  piece(i: number): string {
    return i === this.pieces - 1 && this.lastPiece !== undefined ? this.lastPiece : this.rawPiece(i);
  }

  pieceJson(i: number): string {
    if ((i === this.pieces - 1 && this.lastPiece !== undefined) || (i === 0 && this.start.offset > 0)) {
      return JSON.stringify(this.piece(i));
    }
    return tokenJson(this.start.index + i);
  }

  text(): string {
    let out = '';
    for (let i = 0; i < this.pieces; i++) out += this.piece(i);
    return out;
  }
}

/** Reasoning tokens start further into the sequence, so they read differently from the content. */
export const REASONING_START = 6;

export function reasoningText(count: number): string {
  return sequence(count, REASONING_START);
}

/** The arguments of every mock tool call, streamed in pieces of 4 characters. */
export const TOOL_ARGUMENTS = '{"city":"Paris","unit":"celsius"}';
export const TOOL_ARGUMENT_PIECES: readonly string[] = Array.from(
  { length: Math.ceil(TOOL_ARGUMENTS.length / 4) },
  (_, i) => TOOL_ARGUMENTS.slice(i * 4, i * 4 + 4),
);
