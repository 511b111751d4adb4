// The unit cases of cases.js under Node's test runner (they also run in
// Chromium, see web/client_test.go).
import test from 'node:test';
import { tests } from './cases.js';

for (const { name, fn } of tests) test(name, { timeout: 10000 }, fn);
