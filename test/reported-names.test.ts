import { describe, expect, it } from 'vitest';
import { headerText } from '../src/pipeline/response-head.js';
import { MAX_REPORTED_NAME_BYTES, nameFault } from '../src/workers/reported-names.js';

/** The one rule of a name a worker reports, and the one encoding of a name in a header (see worker-names.test.ts). */

const CHINESE = '模型-lora';
const ESC = 'evil\u001b[31m-red';
const CRLF = 'evil\r\nx-injected: 1';

describe('the rule of a reported name', () => {
  it('serves any Unicode name of at most 256 bytes, refuses control characters, lone surrogates and longer names', () => {
    for (const ok of [
      CHINESE,
      'café',
      'meta-llama/Llama-3.1-8B-Instruct',
      '50% lora',
      'émoji-🦙',
      'a'.repeat(256),
    ])
      expect(nameFault(ok), ok).toBeUndefined();
    expect(nameFault(ESC)).toBe('control_character');
    expect(nameFault(CRLF)).toBe('control_character');
    expect(nameFault('del\u007f')).toBe('control_character');
    expect(nameFault('c1\u0085')).toBe('control_character');
    expect(nameFault('rlo\u202Egnp.exe')).toBe('control_character');
    expect(nameFault('nul\u0000')).toBe('control_character');
    expect(nameFault('lone\uD800')).toBe('not_unicode');
    expect(nameFault('a'.repeat(MAX_REPORTED_NAME_BYTES + 1))).toBe('too_long');
    // 86 three-byte characters are 258 bytes, though 86 UTF-16 units.
    expect(nameFault('模'.repeat(86))).toBe('too_long');
    expect(nameFault('')).toBe('empty');
  });

  it('writes a name in a header as visible ASCII, percent-encoding the rest so that decodeURIComponent gives it back', () => {
    expect(headerText('meta-llama/Llama-3.1-8B-Instruct')).toBe('meta-llama/Llama-3.1-8B-Instruct');
    expect(headerText(CHINESE)).toBe('%E6%A8%A1%E5%9E%8B-lora');
    for (const name of [CHINESE, 'café', '50% lora', 'émoji-🦙', ESC, CRLF]) {
      expect(headerText(name)).toMatch(/^[\x21-\x7e]*$/);
      expect(decodeURIComponent(headerText(name))).toBe(name);
    }
    // Total, even on a string that is not Unicode.
    expect(headerText('lone\uD800')).toBe('lone%EF%BF%BD');
  });
});
