import { describe, expect, it } from 'vitest';
import { DASHBOARD_HTML } from '../src/dashboard/page.js';

/** The page carries its browser script bundled (esbuild) as one classic inline script. */
describe('the dashboard page', () => {
  it('is inlined in the page as one classic script, without a module statement', () => {
    const scripts = [...DASHBOARD_HTML.matchAll(/<script>([\s\S]*?)<\/script>/g)];
    expect(scripts).toHaveLength(1);
    expect(scripts[0]![1]).not.toMatch(/^\s*(import|export)\b/m);
    expect(scripts[0]![1]).toContain('"use strict"');
  });
});
