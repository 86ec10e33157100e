// A voice session through the gateway's guardrails (server/guardrails_sdk_test.go),
// with the official SDK's OpenAIRealtimeWS as the client, unchanged. It
// prints one JSON object: the events' types, the errors, what the client got.
//
//   GATEWAY_BASE  https://127.0.0.1:PORT/v1 (the SDK only dials wss://)
//   GATEWAY_KEY   a gateway key
//   MODEL         the model group
//   SCENARIO      speech: a clean turn, a turn the input guardrail stops, a tool call
//                 tools:  a tool call the tool guardrail stops, then the model's answer,
//                         which the output guardrail cuts
import OpenAI from 'openai';
import { OpenAIRealtimeWS } from 'openai/realtime/ws';

const out = { events: [], errors: [], audio_deltas: 0, transcript: '', user_transcripts: [], tool_calls: [] };
const timeout = (what) => new Promise((_, rej) => setTimeout(() => rej(new Error(`timed out: ${what}`)), 15000));

// 100 ms of PCM16 24 kHz samples.
const speech = Buffer.alloc(4800).toString('base64');
const tool = { type: 'function', name: 'manage_account', description: 'Changes an account.',
  parameters: { type: 'object', properties: { action: { type: 'string' } } } };

// waiter registers one-shot handlers by event type (or 'guardrail' for a
// guardrail_violation error) before what causes them is sent.
function waiter() {
  const seen = new Map();
  return {
    on: (type) => Promise.race([new Promise((res) => seen.set(type, [...(seen.get(type) ?? []), res])), timeout(type)]),
    fire: (key, e) => {
      for (const f of seen.get(key) ?? []) f(e);
      seen.delete(key);
    },
  };
}

function record(e) {
  out.events.push(e.type);
  if (e.type === 'error') out.errors.push({ type: e.error?.type, message: e.error?.message });
  if (e.type === 'response.output_audio.delta') out.audio_deltas++;
  if (e.type === 'response.output_audio_transcript.delta') out.transcript += e.delta;
  if (e.type === 'conversation.item.input_audio_transcription.completed') out.user_transcripts.push(e.transcript);
  if (e.type === 'response.function_call_arguments.done') out.tool_calls.push({ name: e.name, call_id: e.call_id, arguments: e.arguments });
}

function speak(send) {
  for (let i = 0; i < 5; i++) send({ type: 'input_audio_buffer.append', audio: speech });
  send({ type: 'input_audio_buffer.commit' });
}

async function speechScenario(send, w) {
  // A clean turn: the gateway answers it once its transcript passed.
  let done = w.on('response.done');
  const transcribed = w.on('conversation.item.input_audio_transcription.completed');
  speak(send);
  await transcribed;
  await done;
  // A turn the input guardrail stops: the error, then the spoken warning.
  const stopped = w.on('guardrail');
  done = w.on('response.done');
  speak(send);
  await stopped;
  await done;
  // A tool call (no tool guardrail on this key), its output, the answer.
  const args = w.on('response.function_call_arguments.done');
  done = w.on('response.done');
  send({ type: 'response.create', response: { tool_choice: 'required' } });
  const call = await args;
  await done;
  done = w.on('response.done');
  send({ type: 'conversation.item.create', item: { type: 'function_call_output', call_id: call.call_id, output: '{"ok":true}' } });
  send({ type: 'response.create' });
  await done;
}

async function toolsScenario(send, w) {
  // The blocked call's response, then the model's answer to the refusal,
  // which the output guardrail cuts.
  const stopped = w.on('guardrail');
  const done = w.on('response.done');
  send({ type: 'response.create', response: { tool_choice: 'required' } });
  await stopped;
  await done;
  const cut = w.on('guardrail');
  const answered = w.on('response.done');
  await cut;
  await answered;
}

try {
  const w = waiter();
  const client = new OpenAI({ apiKey: process.env.GATEWAY_KEY, baseURL: process.env.GATEWAY_BASE });
  const rt = new OpenAIRealtimeWS({ model: process.env.MODEL }, client);
  const onEvent = (e) => {
    record(e);
    w.fire(e.type, e);
    if (e.type === 'error' && e.error?.type === 'guardrail_violation') w.fire('guardrail', e);
  };
  rt.on('event', onEvent);
  rt.on('error', () => {}); // error events arrive on 'event' too: recorded there
  await w.on('session.created');
  const updated = w.on('session.updated');
  rt.send({ type: 'session.update', session: { type: 'realtime', instructions: 'From the SDK.', tools: [tool] } });
  await updated;
  if (process.env.SCENARIO === 'speech') await speechScenario((e) => rt.send(e), w);
  else await toolsScenario((e) => rt.send(e), w);
  rt.close({ code: 1000, reason: 'done' });
} catch (e) {
  out.failure = String(e?.message ?? e);
}
console.log(JSON.stringify(out));
process.exit(0);
