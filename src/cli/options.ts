import { InvalidArgumentError } from 'commander';

export function parseIntOption(min: number, max = Number.MAX_SAFE_INTEGER) {
  return (value: string): number => {
    const n = Number(value);
    if (!Number.isInteger(n) || n < min || n > max) {
      throw new InvalidArgumentError(`expected an integer from ${min} to ${max}, got '${value}'.`);
    }
    return n;
  };
}

export function parseNumberOption(min: number) {
  return (value: string): number => {
    const n = Number(value);
    if (!Number.isFinite(n) || n < min)
      throw new InvalidArgumentError(`expected a number >= ${min}, got '${value}'.`);
    return n;
  };
}

export function collect(value: string, previous: string[] = []): string[] {
  return [
    ...previous,
    ...value
      .split(',')
      .map((s) => s.trim())
      .filter(Boolean),
  ];
}
