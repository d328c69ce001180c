// tide bench serve against tide serve (the tiny fixture model on the CPU): every request of a small random and
// shared-prefix workload completes with exactly the tokens asked for, and the result file carries the figures.
// Failed requests are a result (exit 0) unless --fail-on-error; a server that cannot be reached is an error.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { startServer, binary } from './harness.mjs';

let server;
let dir;
let runs = 0;
before(async () => {
  server = await startServer();
  dir = fs.mkdtempSync(path.join(os.tmpdir(), 'tide-bench-serve-'));
});
after(async () => {
  fs.rmSync(dir, { recursive: true, force: true });
  assert.equal(await server.stop(), 0);
});

// Runs `tide bench serve` with `args`; resolves to {code, stdout, stderr}.
function bench(args) {
  return new Promise((resolve) => {
    execFile(binary, ['bench', 'serve', ...args], { timeout: 120000 }, (error, stdout, stderr) => {
      resolve({ code: error ? error.code : 0, stdout, stderr });
    });
  });
}

// Runs it against the server with a result file; resolves to {code, stdout, stderr, result}.
async function benchJson(args) {
  const file = path.join(dir, `result-${runs++}.json`);
  const run = await bench(['--base-url', server.base, '--result-json', file, ...args]);
  assert.ok(fs.existsSync(file), `no result file:\n${run.stdout}\n${run.stderr}`);
  return { ...run, result: JSON.parse(fs.readFileSync(file, 'utf8')) };
}

function assertAllCompleted(result, numPrompts, inputLen, outputLen, maxConcurrency) {
  const all = (value) => Array(numPrompts).fill(value);
  assert.equal(result.completed, numPrompts);
  assert.equal(result.failed, 0);
  assert.deepEqual(result.finish_reason_counts, { length: numPrompts });
  assert.deepEqual(result.finish_reasons, all('length'));
  assert.deepEqual(result.errors, all(''));
  assert.deepEqual(result.http_statuses, all(200));
  assert.deepEqual(result.output_lens, all(outputLen));
  assert.deepEqual(result.input_lens, all(inputLen));
  assert.equal(result.total_output_tokens, numPrompts * outputLen);
  assert.equal(result.total_input_tokens, numPrompts * inputLen);
  for (const key of ['duration', 'request_throughput', 'output_throughput', 'total_token_throughput',
    'max_output_tokens_per_s', 'mean_ttft_ms', 'median_ttft_ms', 'p99_ttft_ms', 'mean_tpot_ms', 'median_tpot_ms',
    'p99_tpot_ms', 'mean_itl_ms', 'median_itl_ms', 'p99_itl_ms', 'mean_e2el_ms', 'median_e2el_ms', 'p99_e2el_ms']) {
    assert.ok(typeof result[key] === 'number' && result[key] > 0, `${key} = ${result[key]}`);
  }
  assert.ok(result.max_concurrent_requests >= 1 && result.max_concurrent_requests <= maxConcurrency,
    `max_concurrent_requests = ${result.max_concurrent_requests}`);
  for (let i = 0; i < numPrompts; i++) {
    assert.ok(result.ttfts[i] > 0 && result.latencies[i] >= result.ttfts[i], `request ${i}`);
    assert.ok(result.itls[i].length >= 1 && result.itls[i].length <= outputLen - 1, `request ${i}`);
  }
}

test('a random workload: every request completes with the tokens asked for', async () => {
  const { code, stdout, stderr, result } = await benchJson(['--num-prompts', '8', '--random-input-len', '16',
    '--random-output-len', '8', '--max-concurrency', '4', '--percentiles', '50,90,99', '--fail-on-error']);
  assert.equal(code, 0, stderr);
  assertAllCompleted(result, 8, 16, 8, 4);
  assert.equal(result.config.vocab_size, 1024);  // from the server's /v1/models
  assert.equal(result.config.dataset, 'random');
  assert.equal(result.max_concurrency, 4);
  assert.equal(result.request_rate, 'inf');
  assert.ok(result.p90_itl_ms > 0);
  assert.match(stdout, /=+ Serving Benchmark Result =+/);
  assert.match(stdout, /Successful requests: +8\n/);
  assert.match(stdout, /Finish reasons: +length 8\n/);
  assert.match(stdout, /P90 TTFT \(ms\): +\d/);
});

test('a shared-prefix workload: prompts of a group share their prefix, and the server reuses it', async () => {
  const { code, stderr, result } = await benchJson(['--dataset', 'shared-prefix', '--shared-prefix-groups', '2',
    '--shared-prefix-len', '32', '--random-prefix-len', '32', '--random-input-len', '16', '--random-output-len', '8',
    '--num-prompts', '8', '--max-concurrency', '4', '--seed', '5', '--fail-on-error']);
  assert.equal(code, 0, stderr);
  assertAllCompleted(result, 8, 32 + 32 + 16, 8, 4);
  assert.deepEqual(result.prefix_groups, [0, 1, 0, 1, 0, 1, 0, 1]);
  // Requests 4..7 start after an earlier one ended, whose blocks of the common prefix stay cached.
  assert.ok(result.total_cached_tokens > 0, `total_cached_tokens = ${result.total_cached_tokens}`);
});

test('Poisson arrivals at a request rate', async () => {
  const { code, stderr, result } = await benchJson(['--num-prompts', '8', '--random-input-len', '8',
    '--random-output-len', '4', '--request-rate', '200', '--num-warmups', '1', '--fail-on-error']);
  assert.equal(code, 0, stderr);
  assertAllCompleted(result, 8, 8, 4, 8);
  assert.equal(result.request_rate, 200);
  assert.equal(result.max_concurrency, null);
});

test('failed requests are a result; --fail-on-error makes them an exit status', async () => {
  // Prompts longer than the model's 8192 positions: every request is refused with 400.
  const args = ['--num-prompts', '3', '--random-input-len', '9000', '--random-output-len', '4'];
  const { code, result } = await benchJson(args);
  assert.equal(code, 0);
  assert.equal(result.completed, 0);
  assert.equal(result.failed, 3);
  assert.deepEqual(result.http_statuses, [400, 400, 400]);
  for (const error of result.errors) assert.match(error, /^HTTP 400: .*maximum context length/);
  const failing = await benchJson([...args, '--fail-on-error']);
  assert.equal(failing.code, 1);
  assert.match(failing.stderr, /3 of 3 requests failed/);
});

test('a server that cannot be reached is an error', async () => {
  const { code, stderr } = await bench(['--base-url', 'http://127.0.0.1:1', '--num-prompts', '1', '--vocab-size', '100']);
  assert.equal(code, 1);
  assert.match(stderr, /cannot reach the server/);
});
