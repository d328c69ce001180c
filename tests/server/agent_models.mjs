// Model folders and scripts for the agent-feature tests: the tiny fixture model with Cohere's real chat templates
// (Command R7B's named list default / tool_use / rag; Command A Reasoning's template), served by tide_scripted,
// whose sample op plays a scripted text for requests with a given seed (tests/server/scripted_tide.cpp).
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { repoRoot, modelDir } from './harness.mjs';

const templates = path.join(repoRoot, 'tests', 'fixtures', 'chat-templates');
const readTemplate = (name) => fs.readFileSync(path.join(templates, name), 'utf8');

export const scriptedBinary = process.env.TIDE_SCRIPTED_BINARY
  || path.join(repoRoot, 'build', 'tests', 'tide_scripted');

// A copy of the tiny model folder (weights linked) whose tokenizer_config.json holds `chatTemplate`.
export function modelWithTemplate(chatTemplate) {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'tide-agent-'));
  for (const file of ['config.json', 'generation_config.json', 'tokenizer.json', 'model.safetensors']) {
    fs.symlinkSync(path.join(modelDir, file), path.join(dir, file));
  }
  const config = JSON.parse(fs.readFileSync(path.join(modelDir, 'tokenizer_config.json'), 'utf8'));
  config.chat_template = chatTemplate;
  fs.writeFileSync(path.join(dir, 'tokenizer_config.json'), JSON.stringify(config));
  return dir;
}

export const r7bTemplates = () => modelWithTemplate([
  { name: 'default', template: readTemplate('command-r7b-12-2024.default.jinja') },
  { name: 'tool_use', template: readTemplate('command-r7b-12-2024.tool_use.jinja') },
  { name: 'rag', template: readTemplate('command-r7b-12-2024.rag.jinja') },
]);
export const reasoningTemplate = () => modelWithTemplate(readTemplate('command-a-reasoning-08-2025.default.jinja'));

// Writes {seed: text} to a temporary file; returns the program arguments for startServer.
export function scriptedProgram(scripts) {
  const file = path.join(fs.mkdtempSync(path.join(os.tmpdir(), 'tide-script-')), 'script.json');
  fs.writeFileSync(file, JSON.stringify(scripts));
  return [scriptedBinary, '--script', file];
}

export const weatherTool = {
  type: 'function',
  function: {
    name: 'get_weather',
    description: 'The weather in a city',
    parameters: { type: 'object', properties: { city: { type: 'string' }, days: { type: 'integer' } }, required: ['city'] },
  },
};

// Reads an SSE response into its parsed events ({event, data}); `data` is JSON unless it is [DONE].
export async function readEvents(res) {
  const text = await res.text();
  const events = [];
  for (const block of text.split('\n\n')) {
    if (!block.trim()) continue;
    let event = null;
    let data = '';
    for (const line of block.split('\n')) {
      if (line.startsWith('event: ')) event = line.slice(7);
      if (line.startsWith('data: ')) data += line.slice(6);
    }
    events.push({ event, data: data === '[DONE]' ? data : JSON.parse(data) });
  }
  return events;
}
