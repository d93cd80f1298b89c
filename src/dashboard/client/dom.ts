/** Building and finding DOM nodes. */

const SVGNS = 'http://www.w3.org/2000/svg';

/** Attributes of `el`: `text` sets the text content, `cls` the class; null and undefined are left out. */
export type Attrs = Record<string, string | number | boolean | null | undefined>;
export type Child = Node | string | null | undefined;

/** The element of the page with this id, of this type. */
export function byId<T extends Element>(id: string, type: abstract new () => T): T {
  const node = document.getElementById(id);
  if (!node) throw new Error(`the page has no #${id}`);
  if (!(node instanceof type)) throw new Error(`#${id} is not a ${type.name}`);
  return node;
}

/** The HTML element of the page with this id. */
export function $(id: string): HTMLElement {
  return byId(id, HTMLElement);
}

export function el<K extends keyof HTMLElementTagNameMap>(
  tag: K,
  attrs?: Attrs | null,
  children?: readonly Child[],
): HTMLElementTagNameMap[K] {
  const node = document.createElement(tag);
  if (attrs)
    for (const [k, v] of Object.entries(attrs)) {
      if (v === undefined || v === null) continue;
      if (k === 'text') node.textContent = String(v);
      else if (k === 'cls') node.className = String(v);
      else node.setAttribute(k, String(v));
    }
  if (children)
    for (const c of children) {
      if (c === null || c === undefined) continue;
      node.appendChild(typeof c === 'string' ? document.createTextNode(c) : c);
    }
  return node;
}

export function svg<K extends keyof SVGElementTagNameMap>(
  tag: K,
  attrs: Record<string, string | number>,
): SVGElementTagNameMap[K] {
  const node = document.createElementNS(SVGNS, tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (k === 'text') node.textContent = String(v);
    else node.setAttribute(k, String(v));
  }
  return node;
}

export function td(text: string, cls?: string): HTMLTableCellElement {
  return el('td', { text: text, cls: cls });
}

/** Replaces the body rows of a table; a row saying `emptyText` across `columns` when there is none. */
export function replaceRows(
  table: HTMLTableElement,
  rows: readonly HTMLTableRowElement[],
  columns: number,
  emptyText: string,
): void {
  const body = table.tBodies[0];
  if (!body) throw new Error(`#${table.id} has no body`);
  const frag = document.createDocumentFragment();
  if (rows.length === 0)
    frag.appendChild(el('tr', null, [el('td', { cls: 'empty', colspan: columns, text: emptyText })]));
  for (const row of rows) frag.appendChild(row);
  body.replaceChildren(frag);
}
