import { randomBytes } from 'node:crypto';

/** Ids shaped like Anthropic's: `msg_…` for a message, `toolu_…` for a tool use. */
export function newMessageId(): string {
  return `msg_${randomBytes(12).toString('hex')}`;
}

export function newToolUseId(): string {
  return `toolu_${randomBytes(12).toString('hex')}`;
}
