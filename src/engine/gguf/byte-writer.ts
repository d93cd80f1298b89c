/** An append-only little-endian buffer that grows by doubling. */
export class ByteWriter {
  private buffer = Buffer.alloc(1024);
  private length = 0;

  get size(): number {
    return this.length;
  }

  /**
   * Room for `n` more bytes; returns the buffer to write into and where. Callers must take the
   * buffer from here, after growing, not read `this.buffer` before the call.
   */
  private room(n: number): [Buffer, number] {
    if (this.length + n > this.buffer.length) {
      const next = Buffer.alloc(Math.max(this.buffer.length * 2, this.length + n));
      this.buffer.copy(next, 0, 0, this.length);
      this.buffer = next;
    }
    const at = this.length;
    this.length += n;
    return [this.buffer, at];
  }

  u8(v: number): void {
    const [b, at] = this.room(1);
    b.writeUInt8(v, at);
  }
  i8(v: number): void {
    const [b, at] = this.room(1);
    b.writeInt8(v, at);
  }
  u16(v: number): void {
    const [b, at] = this.room(2);
    b.writeUInt16LE(v, at);
  }
  i16(v: number): void {
    const [b, at] = this.room(2);
    b.writeInt16LE(v, at);
  }
  u32(v: number): void {
    const [b, at] = this.room(4);
    b.writeUInt32LE(v, at);
  }
  i32(v: number): void {
    const [b, at] = this.room(4);
    b.writeInt32LE(v, at);
  }
  u64(v: number | bigint): void {
    const [b, at] = this.room(8);
    b.writeBigUInt64LE(BigInt(v), at);
  }
  i64(v: number | bigint): void {
    const [b, at] = this.room(8);
    b.writeBigInt64LE(BigInt(v), at);
  }
  f32(v: number): void {
    const [b, at] = this.room(4);
    b.writeFloatLE(v, at);
  }
  f64(v: number): void {
    const [b, at] = this.room(8);
    b.writeDoubleLE(v, at);
  }
  bytes(bytes: Uint8Array): void {
    const [b, at] = this.room(bytes.length);
    b.set(bytes, at);
  }
  /** Zero bytes up to the next multiple of `alignment` (new room is zero-filled). */
  pad(alignment: number): void {
    const rest = this.length % alignment;
    if (rest !== 0) this.room(alignment - rest);
  }

  toBuffer(): Buffer {
    return this.buffer.subarray(0, this.length);
  }
}
