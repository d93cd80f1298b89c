import type { Token } from 'node-llama-cpp';

const REPLACEMENT_CHAR = '\ufffd';
/** A UTF-8 character has at most 4 bytes, so at most 3 tokens can be waiting for its end. */
const MAX_PENDING_TOKENS = 3;

export type Detokenize = (tokens: readonly Token[], lastTokens: readonly Token[]) => string;

/**
 * Turns generated tokens into text that is safe to send: a token that ends inside a multi-byte
 * UTF-8 character waits for the next ones, and text that could be the start of a stop string
 * waits until it is clear whether the stop string follows. Stop strings are not included in
 * the output (vLLM's default).
 */
export class TokenText {
  private pending: Token[] = [];
  private recent: Token[] = [];
  private held = '';
  /** The stop string that ended the text, once one did. */
  stoppedBy: string | undefined;

  private readonly stops: readonly string[];

  constructor(
    private readonly detokenize: Detokenize,
    stops: readonly string[],
  ) {
    this.stops = stops.filter((s) => s.length > 0);
  }

  /** Adds a token; returns the text now safe to send (often ''). */
  push(token: Token): string {
    if (this.stoppedBy !== undefined) return '';
    this.pending.push(token);
    const text = this.detokenize(this.pending, this.recent);
    if (text.endsWith(REPLACEMENT_CHAR) && this.pending.length <= MAX_PENDING_TOKENS) return '';
    this.recent = [...this.recent, ...this.pending].slice(-8);
    this.pending = [];
    this.held += text;
    return this.release();
  }

  /** The generation ended: whatever is held is sent as it is. */
  flush(): string {
    if (this.stoppedBy !== undefined) return '';
    if (this.pending.length > 0) this.held += this.detokenize(this.pending, this.recent);
    this.pending = [];
    const out = this.held;
    this.held = '';
    return out;
  }

  private release(): string {
    let stopAt = -1;
    for (const stop of this.stops) {
      const at = this.held.indexOf(stop);
      if (at >= 0 && (stopAt < 0 || at < stopAt)) {
        stopAt = at;
        this.stoppedBy = stop;
      }
    }
    if (stopAt >= 0) {
      const out = this.held.slice(0, stopAt);
      this.held = '';
      return out;
    }
    const keep = this.longestStopPrefixAtEnd();
    const out = this.held.slice(0, this.held.length - keep);
    this.held = this.held.slice(this.held.length - keep);
    return out;
  }

  private longestStopPrefixAtEnd(): number {
    let longest = 0;
    for (const stop of this.stops) {
      for (let k = Math.min(stop.length - 1, this.held.length); k > longest; k--) {
        if (this.held.endsWith(stop.slice(0, k))) {
          longest = k;
          break;
        }
      }
    }
    return longest;
  }
}
