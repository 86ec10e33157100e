// A voice session with another provider behind the gateway
// (server/providers_test.go), through an official OpenAI client unchanged:
// audio in, audio and a transcript out, a tool call and its output, and an
// interruption (response.cancel mid-answer). It prints one JSON object.
//
//   CLIENT        openai (the official SDK's OpenAIRealtimeWS) or agents
//                 (@openai/agents-realtime's OpenAIRealtimeWebSocket)
//   GATEWAY_BASE  https://127.0.0.1:PORT/v1 (openai: it only dials wss://)
//   GATEWAY_URL   ws(s)://127.0.0.1:PORT/v1/realtime?model=GROUP (agents)
//   GATEWAY_KEY   a gateway key
//   MODEL         the model group
//   TOOL_BY       choice (response.create's tool_choice) or text (the user asks)
import OpenAI from 'openai';
import { OpenAIRealtimeWS } from 'openai/realtime/ws';
import { OpenAIRealtimeWebSocket } from '@openai/agents-realtime';

const model = process.env.MODEL;
const out = { events: [], statuses: [], turns_done: 0, audio_deltas: 0, transcript: '' };
const timeout = (what) => new Promise((_, rej) => setTimeout(() => rej(new Error(`timed out: ${what}`)), 15000));

// 100 ms of PCM16 24 kHz speech-loud samples (mockai's VAD calls it speech).
const speech = (() => {
  const b = Buffer.alloc(4800);
  for (let i = 0; i < b.length; i += 2) b.writeInt16LE(i % 4 === 0 ? 8000 : -8000, i);
  return b.toString('base64');
})();

const tool = { type: 'function', name: 'get_weather', description: 'The weather in a city.',
  parameters: { type: 'object', properties: { city: { type: 'string' } } } };

// waiter registers one-shot handlers by event type on a stream of events.
function waiter() {
  const seen = new Map();
  return {
    on: (type) => Promise.race([new Promise((res) => seen.set(type, [...(seen.get(type) ?? []), res])), timeout(type)]),
    fire: (e) => {
      for (const f of seen.get(e.type) ?? []) f(e);
      seen.delete(e.type);
    },
  };
}

function record(e) {
  out.events.push(e.type);
  if (e.type === 'response.done') {
    out.statuses.push(e.response.status);
    out.usage_present = e.response.usage !== undefined;
  }
  if (e.type === 'response.output_audio.delta') out.audio_deltas++;
  if (e.type === 'response.output_audio_transcript.delta') out.transcript += e.delta;
  if (e.type === 'response.function_call_arguments.done') out.tool_call = { name: e.name, call_id: e.call_id };
}

// conversation runs the session's turns with send, whatever the client.
// configure says whether to send the session's configuration (the agents
// transport sends its own at connect, from initialSessionConfig). Every
// wait is registered before the event that causes it is sent: one socket
// read may carry several events, delivered back to back.
async function conversation(send, w, configure) {
  if (configure) {
    const updated = w.on('session.updated');
    send({ type: 'session.update', session: { type: 'realtime', instructions: 'From the SDK.', tools: [tool],
      audio: { input: { transcription: { model: 'whisper-1' } } } } });
    await updated;
  }
  // Audio in, committed by hand, then an answer.
  for (let i = 0; i < 5; i++) send({ type: 'input_audio_buffer.append', audio: speech });
  const committed = w.on('input_audio_buffer.committed');
  send({ type: 'input_audio_buffer.commit' });
  await committed;
  let done = w.on('response.done');
  send({ type: 'response.create' });
  await done;
  // A tool call, its output, and the spoken answer after it. Gemini has no
  // per-response tool_choice: the user's words ask for the tool there.
  const args = w.on('response.function_call_arguments.done');
  done = w.on('response.done');
  if (process.env.TOOL_BY === 'text') {
    const added = w.on('conversation.item.done');
    send({ type: 'conversation.item.create',
      item: { type: 'message', role: 'user', content: [{ type: 'input_text', text: 'Please call get_weather for Paris.' }] } });
    await added;
    send({ type: 'response.create' });
  } else {
    send({ type: 'response.create', response: { tool_choice: { type: 'function', name: 'get_weather' } } });
  }
  const call = await args;
  await done;
  const itemDone = w.on('conversation.item.done');
  send({ type: 'conversation.item.create',
    item: { type: 'function_call_output', call_id: call.call_id, output: '{"sky":"clear"}' } });
  await itemDone;
  done = w.on('response.done');
  send({ type: 'response.create' });
  await done;
  // An interruption: cancelled after its first audio.
  const audio = w.on('response.output_audio.delta');
  done = w.on('response.done');
  send({ type: 'response.create' });
  await audio;
  send({ type: 'response.cancel' });
  await done;
}

try {
  const w = waiter();
  if (process.env.CLIENT === 'openai') {
    const client = new OpenAI({ apiKey: process.env.GATEWAY_KEY, baseURL: process.env.GATEWAY_BASE });
    const rt = new OpenAIRealtimeWS({ model }, client);
    rt.on('event', (e) => { record(e); w.fire(e); });
    rt.on('error', (e) => { out.error ??= String(e?.message ?? e); });
    const created = await w.on('session.created');
    out.created_model = created.session?.model;
    await conversation((e) => rt.send(e), w, true);
    rt.close({ code: 1000, reason: 'done' });
  } else {
    const t = new OpenAIRealtimeWebSocket({ url: process.env.GATEWAY_URL });
    t.on('*', (e) => { record(e); w.fire(e); });
    // Emitted only for a response.done that passes the SDK's schema.
    t.on('turn_done', () => out.turns_done++);
    t.on('error', (e) => { out.error ??= String(e?.error?.message ?? e?.message ?? JSON.stringify(e)); });
    const created = w.on('session.created');
    const updated = w.on('session.updated'); // the transport's own session.update at connect
    await Promise.race([t.connect({ apiKey: process.env.GATEWAY_KEY, model, initialSessionConfig: {
      instructions: 'From the SDK.', tools: [tool], audio: { input: { transcription: { model: 'whisper-1' } } } } }),
    timeout('connect')]);
    out.created_model = (await created).session?.model;
    await updated;
    await conversation((e) => t.sendEvent(e), w, false);
    t.close();
  }
} catch (e) {
  out.error ??= String(e?.message ?? e);
}
out.first_event = out.events[0];
console.log(JSON.stringify(out));
process.exit(0);
