// A GPT-Live session through the gateway's guardrails
// (server/liveguardrails_sdk_test.go), with the official SDK's LiveWS as the
// client, unchanged. mockai answers each session.input_audio.append as one
// user turn (its words scripted by the test); the script speaks TURNS turns,
// one at a time, then closes the session. It prints one JSON object: what
// the SDK got in each turn (the events after that turn's input transcript),
// and how the session ended.
//
//   GATEWAY_BASE  http(s)://127.0.0.1:PORT/v1 (the SDK makes it ws(s)://…/live/sessions)
//   GATEWAY_KEY   a gateway key (its guardrails pick the scenario)
//   MODEL         the Live model group
//   TURNS         what ends each turn, comma-separated: "delegation" (the answer's
//                 session.delegation.created, its last event) or "guardrail" (a
//                 guardrail_violation error)
//   NODE_EXTRA_CA_CERTS  the gateway's certificate, for https://
import OpenAI from 'openai';
import { LiveWS } from 'openai/resources/live/ws';

const out = { turns: [], early: [] };
const timeout = (what) => new Promise((_, rej) => setTimeout(() => rej(new Error(`timed out: ${what}`)), 15000));

// 100 ms of 24 kHz PCM16: one user turn.
const speech = Buffer.alloc(4800, 1).toString('base64');

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

// record files an event under the turn whose input transcript came last.
function record(e) {
  if (e.type === 'session.input_transcript.delta') {
    out.turns.push({ input: e.delta, events: [], audio_deltas: 0, transcript: '', delegations: 0, errors: [] });
    return;
  }
  const turn = out.turns.at(-1);
  if (!turn) {
    out.early.push(e.type);
    return;
  }
  turn.events.push(e.type);
  if (e.type === 'session.output_audio.delta') turn.audio_deltas++;
  if (e.type === 'session.output_transcript.delta') turn.transcript += e.delta;
  if (e.type === 'session.delegation.created') turn.delegations++;
  if (e.type === 'error') turn.errors.push({ type: e.error?.type, message: e.error?.message });
}

try {
  const w = waiter();
  const client = new OpenAI({ apiKey: process.env.GATEWAY_KEY, baseURL: process.env.GATEWAY_BASE });
  const live = new LiveWS(client);
  live.on('event', (e) => {
    record(e);
    w.fire(e.type, e);
    if (e.type === 'error' && e.error?.type === 'guardrail_violation') w.fire('guardrail', e);
  });
  live.on('error', () => {}); // error events arrive on 'event' too: recorded there
  const closed = new Promise((res) => live.on('close', (code) => res(code)));

  const started = w.on('session.started');
  live.send({ type: 'session.start', session: {
    model: process.env.MODEL, instructions: 'From the SDK, through the guardrails.',
    audio: { format: { type: 'audio/pcm', rate: 24000 }, output: { voice: 'marin' } },
  } });
  await started;

  for (const end of process.env.TURNS.split(',')) {
    const done = w.on(end === 'guardrail' ? 'guardrail' : 'session.delegation.created');
    live.send({ type: 'session.input_audio.append', audio: speech });
    await done;
  }

  // mockai answers in order: session.closed comes after all of the last
  // turn's answer, so whatever of it the gateway let through is recorded.
  const sessionClosed = w.on('session.closed');
  live.send({ type: 'session.close' });
  out.closed_reason = (await sessionClosed).reason;
  out.close_code = await Promise.race([closed, timeout('close')]);
} catch (e) {
  out.failure = String(e?.message ?? e);
}
console.log(JSON.stringify(out));
process.exit(0);
