export * from './base.js';
export * from './file-errors.js';
export * from './http-errors.js';
export * from './storage-errors.js';
export * from './stream-errors.js';
export * from './upstream-errors.js';
export * from './utility-errors.js';
export * from './websocket-errors.js';
