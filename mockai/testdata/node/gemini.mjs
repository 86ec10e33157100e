// Google's official @google/genai live client (ai.live.connect) against
// mockai's Gemini Live dialect, run by mockai/gemini_test.go: proof that
// what mockai sends is what the SDK parses, so gateway tests built on
// mockai's Gemini side hold against Google. It prints one JSON object of
// what the SDK saw; the Go test asserts on it.
//
//   MOCK_HTTP_BASE  http(s)://127.0.0.1:PORT (httpOptions.baseUrl)
//   MOCK_KEY        the API key mockai accepts (also the Vertex bearer token)
//   NODE_EXTRA_CA_CERTS  mockai's certificate, with -tls
import { GoogleGenAI, Modality, Type } from '@google/genai';
import { OAuth2Client } from 'google-auth-library';

const base = process.env.MOCK_HTTP_BASE;
const key = process.env.MOCK_KEY;
const out = {};
const withTimeout = (p, what) =>
  Promise.race([p, new Promise((_, rej) => setTimeout(() => rej(new Error(`timed out: ${what}`)), 10000))]);

// track holds a live session's messages as the SDK parsed them, and its close.
function track() {
  const t = { msgs: [], closed: null };
  t.callbacks = {
    onmessage: (m) => t.msgs.push(m),
    onerror: () => {},
    onclose: (e) => { t.closed = { code: e.code, reason: e.reason }; },
  };
  const poll = (check, what) => withTimeout(new Promise((res) => {
    const tick = () => { const v = check(); if (v !== undefined) res(v); else setTimeout(tick, 5); };
    tick();
  }), what);
  // until resolves with the index of the first message from index from on that pred accepts.
  t.until = (pred, what, from = 0) => poll(() => {
    for (let i = from; i < t.msgs.length; i++) if (pred(t.msgs[i])) return i;
    return undefined;
  }, what);
  t.close = (what) => poll(() => t.closed ?? undefined, what);
  return t;
}

// turn sums up the messages of one model turn, from index from to the
// usageMetadata after its turnComplete, through the SDK's own getters.
function turn(msgs, from, to) {
  const s = { audio_parts: 0, audio_bytes: 0, mime: '', text: '', input_transcript: '', output_transcript: '',
    generation_complete: false, turn_complete: false, interrupted: false };
  for (const m of msgs.slice(from, to + 1)) {
    const sc = m.serverContent;
    if (sc?.modelTurn) {
      const inline = sc.modelTurn.parts?.[0]?.inlineData;
      if (inline) {
        s.audio_parts++;
        s.audio_bytes += Buffer.from(m.data, 'base64').length;
        s.mime = inline.mimeType;
      } else {
        s.text += m.text ?? '';
      }
    }
    if (sc?.inputTranscription) s.input_transcript += sc.inputTranscription.text;
    if (sc?.outputTranscription) s.output_transcript += sc.outputTranscription.text;
    if (sc?.generationComplete) s.generation_complete = true;
    if (sc?.turnComplete) s.turn_complete = true;
    if (sc?.interrupted) s.interrupted = true;
    if (m.usageMetadata) s.usage = m.usageMetadata;
    if (m.sessionResumptionUpdate?.newHandle) s.handle = m.sessionResumptionUpdate.newHandle;
  }
  return s;
}

// turnEnd waits for the usageMetadata that follows the turnComplete at or after from.
async function turnEnd(t, from, what) {
  const done = await t.until((m) => m.serverContent?.turnComplete, `${what}: turnComplete`, from);
  const usage = await t.until((m) => m.usageMetadata, `${what}: usageMetadata`, done);
  return turn(t.msgs, from, usage);
}

// pcm is ms milliseconds of 16 kHz PCM16, loud (a square wave well above
// mockai's speech threshold) or silent.
const pcm = (ms, loud) => {
  const b = Buffer.alloc(ms * 32);
  if (loud) for (let i = 0; i < b.length; i += 2) b.writeInt16LE((i / 2) % 20 < 10 ? 8000 : -8000, i);
  return b.toString('base64');
};

try {
  // AI Studio (the default v1), audio out, every setup field the dialect reads.
  const ai = new GoogleGenAI({ apiKey: key, httpOptions: { baseUrl: base } });
  const a = track();
  const session = await ai.live.connect({
    model: 'gemini-3.8-live',
    config: {
      responseModalities: [Modality.AUDIO],
      speechConfig: { voiceConfig: { prebuiltVoiceConfig: { voiceName: 'Kore' } } },
      systemInstruction: 'From the SDK.',
      tools: [{ functionDeclarations: [{
        name: 'get_weather', description: 'The weather in a city.',
        parameters: { type: Type.OBJECT, properties: { city: { type: Type.STRING }, days: { type: Type.INTEGER } }, required: ['city'] },
      }] }],
      inputAudioTranscription: {},
      outputAudioTranscription: {},
      sessionResumption: {},
      contextWindowCompression: { slidingWindow: {} },
    },
    callbacks: a.callbacks,
  });
  out.setup_complete = session.setupComplete !== undefined;

  // Speech then silence: automatic activity detection ends the turn.
  for (let i = 0; i < 3; i++) session.sendRealtimeInput({ audio: { data: pcm(100, true), mimeType: 'audio/pcm;rate=16000' } });
  for (let i = 0; i < 3; i++) session.sendRealtimeInput({ audio: { data: pcm(100, false), mimeType: 'audio/pcm;rate=16000' } });
  out.audio_turn = await turnEnd(a, 0, 'audio turn');
  out.handle = a.msgs[await a.until((m) => m.sessionResumptionUpdate?.newHandle, 'resumption handle')].sessionResumptionUpdate.newHandle;

  // A text turn naming the tool: a toolCall, then the spoken answer after the toolResponse.
  const before = a.msgs.length;
  session.sendClientContent({ turns: 'What is the weather in Paris? Use get_weather.', turnComplete: true });
  const callAt = await a.until((m) => m.toolCall, 'toolCall', before);
  const call = a.msgs[callAt].toolCall.functionCalls[0];
  out.tool_call = { id_set: !!call.id, name: call.name, args: call.args, count: a.msgs[callAt].toolCall.functionCalls.length };
  const afterCall = a.msgs.length;
  session.sendToolResponse({ functionResponses: [{ id: call.id, name: call.name, response: { output: 'sunny' } }] });
  out.after_tool = await turnEnd(a, afterCall, 'after toolResponse');
  session.close();
  out.close = (await a.close('close')).code;

  // A new connection resumes with the last handle.
  const r = track();
  const resumed = await ai.live.connect({
    model: 'gemini-3.8-live',
    config: { responseModalities: [Modality.AUDIO], sessionResumption: { handle: out.handle } },
    callbacks: r.callbacks,
  });
  out.resumed_setup_complete = resumed.setupComplete !== undefined;
  // A second setup ends the session as Google does (the SDK never sends one; its socket can).
  resumed.conn.send(JSON.stringify({ setup: { model: 'models/gemini-3.8-live' } }));
  out.second_setup = await r.close('second setup');

  // TEXT responses: the SDK's text getter.
  const tx = track();
  const textSession = await ai.live.connect({ model: 'gemini-3.8-live', config: { responseModalities: [Modality.TEXT] }, callbacks: tx.callbacks });
  textSession.sendClientContent({ turns: 'Hello?' });
  out.text_turn = await turnEnd(tx, 0, 'text turn');
  textSession.close();

  // Vertex AI with an OAuth token (v1beta1, the project's model path).
  const auth = new OAuth2Client();
  auth.setCredentials({ access_token: key, expiry_date: Date.now() + 3600 * 1000 });
  const vertex = new GoogleGenAI({ vertexai: true, project: 'mock-project', location: 'us-central1',
    httpOptions: { baseUrl: base }, googleAuthOptions: { authClient: auth } });
  const v = track();
  const vs = await vertex.live.connect({ model: 'gemini-live-2.5-flash', config: {}, callbacks: v.callbacks });
  out.vertex_setup_complete = vs.setupComplete !== undefined;
  vs.sendClientContent({ turns: 'Hello from Vertex.' });
  out.vertex_turn = await turnEnd(v, 0, 'vertex turn');
  vs.close();
} catch (e) {
  out.error = String(e?.stack ?? e?.message ?? e);
}
console.log(JSON.stringify(out));
process.exit(0);
