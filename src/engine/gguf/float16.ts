const f32 = new Float32Array(1);
const u32 = new Uint32Array(f32.buffer);

/**
 * IEEE 754 binary16 bits of a number, rounded to nearest even. Node 20 has no Float16Array,
 * and the bytes of a model file must not depend on the runtime, so it is done by hand.
 */
export function toFloat16Bits(value: number): number {
  f32[0] = value;
  const x = u32[0]!;
  const sign = (x >>> 16) & 0x8000;
  const exponent = (x >>> 23) & 0xff;
  const mantissa = x & 0x7fffff;
  if (exponent === 0xff) return sign | 0x7c00 | (mantissa ? 0x200 : 0); // Inf or NaN
  const e = exponent - 127 + 15;
  if (e >= 0x1f) return sign | 0x7c00; // overflow to Inf
  if (e <= 0) {
    if (e < -10) return sign; // underflow to zero
    // Subnormal: shift the mantissa (with its implicit 1) into place, rounding to nearest even.
    const m = mantissa | 0x800000;
    const shift = 14 - e;
    const half = 1 << (shift - 1);
    const rest = m & ((1 << shift) - 1);
    let r = m >>> shift;
    if (rest > half || (rest === half && r & 1)) r++;
    return sign | r;
  }
  let r = (e << 10) | (mantissa >>> 13);
  const rest = mantissa & 0x1fff;
  if (rest > 0x1000 || (rest === 0x1000 && r & 1)) r++; // a carry into the exponent is correct
  return sign | r;
}

/** The number a binary16 bit pattern stands for (used to check round trips). */
export function fromFloat16Bits(bits: number): number {
  const sign = bits & 0x8000 ? -1 : 1;
  const exponent = (bits >>> 10) & 0x1f;
  const mantissa = bits & 0x3ff;
  if (exponent === 0) return sign * mantissa * 2 ** -24;
  if (exponent === 0x1f) return mantissa ? Number.NaN : sign * Number.POSITIVE_INFINITY;
  return sign * (1 + mantissa / 1024) * 2 ** (exponent - 15);
}
