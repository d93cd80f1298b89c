import { describe, expect, it } from 'vitest';
import { mulberry32 } from '../src/engine/prng.js';
import { RadixTree } from '../src/routing/index.js';

function randomText(rand: () => number, length: number, alphabet = 26): string {
  return String.fromCharCode(...Array.from({ length }, () => 97 + Math.floor(rand() * alphabet)));
}

function match(tree: RadixTree, text: string, allowed?: string[]): [number, string[]] {
  const m = tree.prefixMatch(text, allowed && new Set(allowed));
  return [m.matchedChars, [...m.workerIds].sort()];
}

describe('RadixTree', () => {
  it('matches inserted text and its prefixes', () => {
    const tree = new RadixTree();
    tree.insert('hello world', 'a');
    expect(match(tree, 'hello world')).toEqual([11, ['a']]);
    expect(match(tree, 'hello world, again')).toEqual([11, ['a']]);
    expect(match(tree, 'hello there')).toEqual([6, ['a']]);
    expect(match(tree, 'xyz')).toEqual([0, []]);
    expect(match(tree, '')).toEqual([0, []]);
    expect(tree.size).toBe(11);
  });

  it('splits edges where texts diverge, keeping each tenant on its own branch', () => {
    const tree = new RadixTree();
    tree.insert('hello world', 'a');
    tree.insert('hello there', 'b');
    expect(tree.size).toBe(11 + 5);
    expect(match(tree, 'hello world')).toEqual([11, ['a']]);
    expect(match(tree, 'hello there')).toEqual([11, ['b']]);
    expect(match(tree, 'hello ')).toEqual([6, ['a', 'b']]);
    expect(match(tree, 'help')).toEqual([3, ['a', 'b']]);
    expect(match(tree, 'hello wobble')).toEqual([8, ['a']]);
  });

  it('splits an edge when a shorter text ends inside it', () => {
    const tree = new RadixTree();
    tree.insert('hello world', 'a');
    tree.insert('hello', 'b');
    expect(tree.size).toBe(11);
    expect(match(tree, 'hello')).toEqual([5, ['a', 'b']]);
    expect(match(tree, 'hello world')).toEqual([11, ['a']]);
    tree.insert('hello world', 'b');
    expect(match(tree, 'hello world')).toEqual([11, ['a', 'b']]);
    expect(tree.size).toBe(11);
  });

  it('stops at the deepest node held by an allowed tenant', () => {
    const tree = new RadixTree();
    tree.insert('hello world', 'a');
    tree.insert('hello there', 'b');
    expect(match(tree, 'hello world', ['b'])).toEqual([6, ['b']]);
    expect(match(tree, 'hello world', ['a', 'c'])).toEqual([11, ['a']]);
    expect(match(tree, 'hello world', ['c'])).toEqual([0, []]);
  });

  it('compares UTF-16 code units, surrogate pairs included', () => {
    const tree = new RadixTree();
    tree.insert('😀😀x', 'a');
    tree.insert('😀😁y', 'b');
    expect(match(tree, '😀😀x')).toEqual([5, ['a']]);
    expect(match(tree, '😀😁')).toEqual([4, ['b']]);
    expect(match(tree, '😀')).toEqual([2, ['a', 'b']]);
  });

  it('removes a tenant everywhere and drops what no one else holds', () => {
    const tree = new RadixTree();
    tree.insert('hello world', 'a');
    tree.insert('hello there', 'b');
    tree.insert('goodbye', 'a');
    tree.removeTenant('a');
    expect(tree.size).toBe(11);
    expect(match(tree, 'hello world')).toEqual([6, ['b']]);
    expect(match(tree, 'goodbye')).toEqual([0, []]);
    tree.removeTenant('nobody');
    expect(tree.size).toBe(11);
    tree.removeTenant('b');
    expect(tree.size).toBe(0);
    expect(match(tree, 'hello')).toEqual([0, []]);
    tree.insert('hello', 'c');
    expect(match(tree, 'hello')).toEqual([5, ['c']]);
  });

  it('evicts the least recently used texts when over maxChars', () => {
    const tree = new RadixTree({ maxChars: 100 });
    const texts = 'abcdefghij'.split('').map((c) => c.repeat(20));
    for (const [i, text] of texts.entries()) {
      tree.insert(text, 'w');
      if (i === 3) tree.insert(texts[0]!, 'w'); // touching a text makes it recent again
      expect(tree.size).toBeLessThanOrEqual(100);
    }
    const kept = texts.filter((t) => tree.prefixMatch(t).matchedChars === 20).map((t) => t[0]);
    expect(kept).toEqual(['g', 'h', 'i', 'j']);
    expect(tree.size).toBe(80);
    expect(match(tree, 'aaaa')).toEqual([0, []]);
  });

  it('evicts tenant by tenant: a node shared with a recent tenant stays for that tenant', () => {
    const tree = new RadixTree({ maxChars: 70 });
    const [a, b, c] = ['a', 'b', 'c'].map((ch) => ch.repeat(30)) as [string, string, string];
    tree.insert(a, 'w1');
    tree.insert(b, 'w2');
    tree.insert(a, 'w2');
    tree.insert(c, 'w1');
    expect(tree.size).toBe(60);
    expect(match(tree, a)).toEqual([30, ['w2']]);
    expect(match(tree, b)).toEqual([0, []]);
    expect(match(tree, c)).toEqual([30, ['w1']]);
  });

  it('evicts up through inner nodes once their children are gone', () => {
    const tree = new RadixTree({ maxChars: 50 });
    tree.insert(`${'x'.repeat(20)}${'y'.repeat(20)}`, 'w');
    tree.insert('x'.repeat(20), 'w'); // splits: 'x' * 20 becomes an inner node, touched after 'y' * 20
    tree.insert('z'.repeat(30), 'w');
    // 70 > 50: the 'y' leaf goes first, then its parent, now a leaf and older than 'z'.
    expect(tree.size).toBe(30);
    expect(match(tree, 'x'.repeat(20))).toEqual([0, []]);
    expect(match(tree, 'z'.repeat(30))).toEqual([30, ['w']]);
  });

  it('stays consistent through many inserts, splits and evictions', () => {
    const rand = mulberry32(11);
    const maxChars = 600;
    const tree = new RadixTree({ maxChars });
    const sent = new Map<string, string[]>(); // worker to the texts it was sent
    let last = '';
    let lastWorker = '';
    for (let i = 0; i < 3000; i++) {
      // A small alphabet makes texts share prefixes, forcing splits at every depth.
      last = randomText(rand, 5 + Math.floor(rand() * 25), 3);
      lastWorker = `w${Math.floor(rand() * 3)}`;
      tree.insert(last, lastWorker);
      const texts = sent.get(lastWorker) ?? [];
      texts.push(last);
      sent.set(lastWorker, texts);
      expect(tree.size).toBeLessThanOrEqual(maxChars);
      expect(tree.prefixMatch(last).matchedChars).toBe(last.length);
      expect(tree.prefixMatch(last, new Set([lastWorker])).workerIds).toEqual([lastWorker]);
    }
    // Soundness: a worker is only ever named for a prefix it was really sent.
    for (let i = 0; i < 500; i++) {
      const probe = randomText(rand, 20, 3);
      const { matchedChars, workerIds } = tree.prefixMatch(probe);
      const prefix = probe.slice(0, matchedChars);
      expect(workerIds.length > 0).toBe(matchedChars > 0);
      for (const id of workerIds) expect(sent.get(id)!.some((t) => t.startsWith(prefix))).toBe(true);
    }
    // The character count never drifted: dropping every tenant empties the tree exactly.
    for (const id of ['w0', 'w1', 'w2']) tree.removeTenant(id);
    expect(tree.size).toBe(0);
  });

  it('looks up 1 KB prompts among 10,000 cached ones correctly (its speed is measured by npm run bench)', () => {
    const rand = mulberry32(12);
    const tree = new RadixTree();
    const systems = Array.from({ length: 20 }, () => randomText(rand, 600));
    const texts = Array.from({ length: 10_000 }, (_, i) => systems[i % 20] + randomText(rand, 424));
    for (const [i, text] of texts.entries()) tree.insert(text, `w${i % 8}`);
    const allowed = new Set(['w0', 'w1', 'w2', 'w3', 'w4', 'w5', 'w6', 'w7']);
    for (const [i, text] of texts.slice(0, 3000).entries()) {
      const worker = `w${i % 8}`;
      // A follow-up of a cached prompt matches all of it, on the worker that has it.
      const followUp = tree.prefixMatch(`${text} and a follow-up`, allowed);
      expect(followUp.matchedChars).toBe(text.length);
      expect(followUp.workerIds).toContain(worker);
      // A prefix of one matches to its end; only workers that were sent it are named.
      const prefix = tree.prefixMatch(text.slice(0, 900), allowed);
      expect(prefix.matchedChars).toBe(900);
      expect(prefix.workerIds).toContain(worker);
      // Restricted to the other workers, the match stops where their texts diverge (the shared system prompt at least).
      const others = new Set([...allowed].filter((w) => w !== worker));
      const elsewhere = tree.prefixMatch(`${text} and a follow-up`, others);
      expect(elsewhere.matchedChars).toBeGreaterThanOrEqual(600);
      expect(elsewhere.matchedChars).toBeLessThan(text.length);
      expect(elsewhere.workerIds).not.toContain(worker);
    }
  });
});
