// Structured outputs through the openai client on the tiny random-weight model (sampled at temperature 1, so
// only the constraint makes the output parse): response_format json_schema / json_object, vLLM's
// structured_outputs regex / choice / grammar and guided_*, streamed and not, on completions and chat (Command
// R7B's templates: the JSON inside Cohere's response markers), tool_choice "required" and a named function
// producing tool calls that parse, Cohere's /v2/chat response_format, and refusals naming the keyword. A Cohere
// chat may think before it answers; a random model would never close the block, so the chats here give it a
// thinking budget.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { startServer, post, metricValues } from './harness.mjs';
import { r7bTemplates, weatherTool } from './agent_models.mjs';

let server;
let client;
before(async () => {
  server = await startServer([], { model: r7bTemplates() });
  client = server.client();
});
after(async () => {
  assert.equal(await server.stop(), 0);
});

// Bounded so that a random model reaches the end: enums, short strings, small integers, short arrays.
const person = {
  type: 'object',
  properties: {
    name: { type: 'string', maxLength: 6 },
    age: { type: 'integer', minimum: 0, maximum: 120 },
    role: { enum: ['admin', 'user', 'guest'] },
    tags: { type: 'array', items: { type: 'string', maxLength: 3 }, maxItems: 2 },
    active: { type: 'boolean' },
  },
  required: ['name', 'age', 'role', 'tags', 'active'],
  additionalProperties: false,
};

function checkPerson(value) {
  assert.deepEqual(Object.keys(value), ['name', 'age', 'role', 'tags', 'active']);
  assert.equal(typeof value.name, 'string');
  assert.ok([...value.name].length <= 6);
  assert.ok(Number.isInteger(value.age) && value.age >= 0 && value.age <= 120);
  assert.ok(['admin', 'user', 'guest'].includes(value.role));
  assert.ok(Array.isArray(value.tags) && value.tags.length <= 2);
  for (const t of value.tags) assert.ok(typeof t === 'string' && [...t].length <= 3);
  assert.equal(typeof value.active, 'boolean');
}

const responseFormat = { type: 'json_schema', json_schema: { name: 'person', schema: person, strict: true } };

test('completions: every sampled output follows the JSON schema', async () => {
  for (let seed = 1; seed <= 12; seed += 1) {
    const r = await client.completions.create({
      model: server.model, prompt: 'A person:', max_tokens: 300, temperature: 1, seed, response_format: responseFormat,
    });
    assert.equal(r.choices[0].finish_reason, 'stop', r.choices[0].text);
    checkPerson(JSON.parse(r.choices[0].text));
  }
});

test('regex, choice and GBNF grammars, and vLLM\'s older guided_* fields', async () => {
  const cases = [
    [{ structured_outputs: { regex: '[0-9]{3}-[a-z]{2,4}' } }, (t) => assert.match(t, /^[0-9]{3}-[a-z]{2,4}$/)],
    [{ guided_regex: '(yes|no), [A-Z][a-z]{0,5}\\.' }, (t) => assert.match(t, /^(yes|no), [A-Z][a-z]{0,5}\.$/)],
    [{ structured_outputs: { choice: ['red', 'green', 'blue ✓'] } }, (t) => assert.ok(['red', 'green', 'blue ✓'].includes(t))],
    [{ guided_grammar: 'root ::= "(" item ("," item){0,3} ")"\nitem ::= [a-c]{1,2}' },
      (t) => assert.match(t, /^\([a-c]{1,2}(,[a-c]{1,2}){0,3}\)$/)],
  ];
  for (const [extra, check] of cases) {
    for (let seed = 1; seed <= 6; seed += 1) {
      const r = await client.completions.create({
        model: server.model, prompt: 'Answer:', max_tokens: 60, temperature: 1, seed, ...extra,
      });
      assert.equal(r.choices[0].finish_reason, 'stop', JSON.stringify(extra));
      check(r.choices[0].text);
    }
  }
});

test('chat: the JSON answer inside Cohere\'s markers, streamed and not; json_object', async () => {
  const messages = [{ role: 'user', content: 'Describe a user as JSON.' }];
  for (let seed = 1; seed <= 4; seed += 1) {
    const r = await client.chat.completions.create({
      model: server.model, messages, max_tokens: 300, temperature: 1, seed, response_format: responseFormat,
      thinking_budget: 8,
    });
    assert.equal(r.choices[0].finish_reason, 'stop');
    checkPerson(JSON.parse(r.choices[0].message.content));
    let streamed = '';
    for await (const chunk of await client.chat.completions.create({
      model: server.model, messages, max_tokens: 300, temperature: 1, seed, response_format: responseFormat, stream: true,
      thinking_budget: 8,
    })) {
      streamed += chunk.choices[0].delta.content || '';
    }
    assert.equal(streamed, r.choices[0].message.content);
  }
  // json_object: any JSON object; a random model may nest deeply, so a short budget can end mid-object.
  const obj = await client.chat.completions.create({
    model: server.model, messages, max_tokens: 40, temperature: 1, seed: 3, response_format: { type: 'json_object' },
    thinking_budget: 0,
  });
  const text = obj.choices[0].message.content;
  assert.ok(text.startsWith('{'), text);
  if (obj.choices[0].finish_reason === 'stop') assert.equal(typeof JSON.parse(text), 'object');
  else assert.equal(obj.choices[0].finish_reason, 'length');
});

test('tool_choice required and a named function give tool calls that parse against the tool schema', async () => {
  const bounded = structuredClone(weatherTool);
  bounded.function.parameters = {
    type: 'object',
    properties: { city: { enum: ['Paris', 'Oslo', 'Lima'] }, days: { type: 'integer', minimum: 1, maximum: 7 } },
    required: ['city', 'days'],
    additionalProperties: false,
  };
  const other = { type: 'function', function: { name: 'get_time', parameters: { type: 'object', properties: { zone: { enum: ['UTC', 'CET'] } }, required: ['zone'] } } };
  const messages = [{ role: 'user', content: 'Weather in Paris?' }];
  for (let seed = 1; seed <= 6; seed += 1) {
    const r = await client.chat.completions.create({
      model: server.model, messages, tools: [bounded, other], tool_choice: 'required', max_tokens: 400, temperature: 1, seed,
      thinking_budget: 8,
    });
    assert.equal(r.choices[0].finish_reason, 'tool_calls', JSON.stringify(r.choices[0].message));
    for (const call of r.choices[0].message.tool_calls) {
      const args = JSON.parse(call.function.arguments);
      if (call.function.name === 'get_weather') {
        assert.ok(['Paris', 'Oslo', 'Lima'].includes(args.city) && args.days >= 1 && args.days <= 7);
      } else {
        assert.equal(call.function.name, 'get_time');
        assert.ok(['UTC', 'CET'].includes(args.zone));
      }
    }
    const named = await client.chat.completions.create({
      model: server.model, messages, tools: [bounded, other], max_tokens: 400, temperature: 1, seed,
      tool_choice: { type: 'function', function: { name: 'get_time' } }, parallel_tool_calls: false, thinking_budget: 8,
    });
    assert.equal(named.choices[0].finish_reason, 'tool_calls');
    assert.equal(named.choices[0].message.tool_calls.length, 1);
    assert.equal(named.choices[0].message.tool_calls[0].function.name, 'get_time');
  }
});

test('Cohere /v2/chat response_format with a schema', async () => {
  const r = await post(server.base, '/v2/chat', {
    messages: [{ role: 'user', content: 'A user, as JSON.' }], seed: 5, temperature: 1, max_tokens: 300,
    response_format: { type: 'json_object', json_schema: person }, thinking: { type: 'enabled', token_budget: 8 },
  });
  assert.equal(r.status, 200, r.text);
  checkPerson(JSON.parse(r.json.message.content[0].text));
});

test('refusals name the field and the schema keyword; the same schema compiles once', async () => {
  const bad = await post(server.base, '/v1/completions', {
    prompt: 'x', response_format: { type: 'json_schema', json_schema: { name: 'n', schema: { type: 'object', not: {} } } },
  });
  assert.equal(bad.status, 400);
  assert.equal(bad.json.error.param, 'response_format');
  assert.match(bad.json.error.message, /'not'/);
  const regex = await post(server.base, '/v1/completions', { prompt: 'x', guided_regex: '(a)\\1' });
  assert.equal(regex.status, 400);
  assert.equal(regex.json.error.param, 'guided_regex');
  const eos = await post(server.base, '/v1/completions', { prompt: 'x', guided_choice: ['a'], ignore_eos: true });
  assert.equal(eos.status, 400);
  const unknown = await post(server.base, '/v1/chat/completions', {
    messages: [{ role: 'user', content: 'x' }], tools: [weatherTool], tool_choice: { type: 'function', function: { name: 'nope' } },
  });
  assert.equal(unknown.status, 400);
  assert.equal(unknown.json.error.param, 'tool_choice');
  // A schema sent again is found compiled.
  const compilations = async () => metricValues(await (await fetch(`${server.base}/metrics`)).text(), 'tide_grammar_compilations_total')[''];
  const before = await compilations();
  const fresh = { type: 'json_schema', json_schema: { name: 'f', schema: { type: 'object', properties: { z: { enum: [1, 2] } }, required: ['z'] } } };
  for (let i = 0; i < 3; i += 1) {
    const r = await client.completions.create({ model: server.model, prompt: 'x', max_tokens: 20, seed: i, response_format: fresh });
    assert.match(r.choices[0].text, /^\{"z": [12]\}$/);
  }
  assert.equal(await compilations(), before + 1);
});
