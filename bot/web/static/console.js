'use strict';
const $ = (sel) => document.querySelector(sel);
const T = $('#transcript'), composer = $('#composer');
const ID_RE = /^[A-Za-z0-9._:-]{1,128}$/;
const ENDED_TEXT = { failed: 'This reply failed.', cancelled: 'Turn cancelled', interrupted: 'This reply was interrupted.' };
// what an empty session offers to ask (the offline demo model shows its tools with them)
const SUGGESTIONS = ['What can you do?', 'Remember that the launch is on Monday', 'What do you remember?', 'Share the launch date with the team'];
const STATUS_TEXT = { new: 'new', idle: 'idle', running: 'running', suspended: 'waiting for approval', failed: 'failed' };

const S = {
  token: sessionStorage.getItem('turnbot.token') || '',
  info: null, list: [], local: new Map(),          // local: ids made here, not yet known to the server
  sid: null, status: 'new', turn: null, pending: null, queued: [],
  loadGen: 0, streamGen: 0, abort: null, wake: null,
  lastInt: 0, lastRaw: '0', deltaBase: 0, deltaN: 0, // SSE position and de-duplication
  bubble: null, progress: null, tools: new Map(), texted: new Map(), ended: new Set(), asked: new Set(), mine: new Set(),
  sending: 0, booted: false, pinned: true,           // pinned: the reader follows the end of the transcript
};

function el(tag, cls, text, attrs) {
  const n = document.createElement(tag);
  if (cls) n.className = cls;
  if (text != null) n.textContent = text;   // data only ever goes through textContent
  for (const k in attrs || {}) n.setAttribute(k, attrs[k]);
  return n;
}
const hex = (n) => Array.from(crypto.getRandomValues(new Uint8Array(Math.ceil(n / 2))), (b) => b.toString(16).padStart(2, '0')).join('').slice(0, n);
const sleep = (ms) => new Promise((r) => { S.wake = r; setTimeout(r, ms); });
const short = (s, n) => (s.length > n ? s.slice(0, n - 1) + '…' : s);

/* ---------- HTTP ---------- */
class ApiError extends Error {
  constructor(status, message, code) { super(message); this.status = status; this.code = code; }
}
function authHeaders() { return S.token ? { Authorization: 'Bearer ' + S.token } : {}; }

async function api(method, path, body) {
  const headers = authHeaders();
  if (body !== undefined) headers['Content-Type'] = 'application/json';
  let res;
  try {
    res = await fetch('/api' + path, { method, headers, cache: 'no-store', body: body === undefined ? undefined : JSON.stringify(body) });
  } catch (e) { throw new ApiError(0, 'Cannot reach the server.'); }
  let data = null;
  try { data = await res.json(); } catch (e) { /* empty or non-JSON body */ }
  if (res.status === 401) askToken(S.token ? 'That token was not accepted.' : '');
  if (!res.ok) {
    const err = (data && data.error) || {};
    throw new ApiError(res.status, err.message || `${res.status} ${res.statusText}`, err.code);
  }
  return data;
}

/* ---------- Auth ---------- */
function askToken(msg) {
  stopStream();
  $('#app').inert = true;  // keep Tab inside the token form
  $('#auth').hidden = false;
  $('#auth-err').textContent = msg || '';
  $('#token').focus();
}
$('#auth-form').addEventListener('submit', (e) => {
  e.preventDefault();
  S.token = $('#token').value.trim();
  sessionStorage.setItem('turnbot.token', S.token);
  $('#auth').hidden = true;
  $('#app').inert = false;
  boot();
});

/* ---------- Sidebar ---------- */
async function refreshList() {
  try {
    const data = await api('GET', '/sessions');
    S.list = data.sessions || [];
    for (const s of S.list) S.local.delete(s.session);
  } catch (e) { return; }
  renderList();
}

function ago(t) {
  const d = Math.max(0, Date.now() / 1000 - t);
  if (d < 60) return 'just now';
  if (d < 3600) return Math.floor(d / 60) + ' min ago';
  if (d < 86400) return Math.floor(d / 3600) + ' h ago';
  return new Date(t * 1000).toLocaleDateString();
}

function renderList() {
  const box = $('#sessions');
  const local = [...S.local].sort((a, b) => b[1] - a[1]).map(([id, t]) => ({ session: id, status: 'new', title: null, updated_at: t }));
  const items = local.concat(S.list);
  if (S.sid && !items.some((s) => s.session === S.sid)) items.unshift({ session: S.sid, status: S.status, title: null, updated_at: Date.now() / 1000 });
  const old = new Map([...box.children].map((b) => [b.dataset.session, b]));
  items.forEach((s, i) => {
    let b = old.get(s.session);
    old.delete(s.session);
    if (!b) {
      b = el('button', '', null, { type: 'button', 'data-session': s.session });
      b.append(el('span', 's-title'), el('span', 's-meta'));
      b.lastChild.append(el('span', 'badge'), el('span', 'when'));
    }
    const st = s.session === S.sid ? liveStatus() : s.status;
    b.title = s.session;
    b.firstChild.textContent = s.title || s.session;
    setBadge(b.querySelector('.badge'), st);
    b.querySelector('.when').textContent = s.updated_at ? ago(s.updated_at) : '';
    b.setAttribute('aria-current', s.session === S.sid ? 'true' : 'false');
    if (box.children[i] !== b) box.insertBefore(b, box.children[i] || null);
  });
  old.forEach((b) => b.remove());
}
$('#sessions').addEventListener('click', (e) => {
  const b = e.target.closest('button[data-session]');
  if (b && b.dataset.session !== S.sid) select(b.dataset.session);
});

function newSession() {
  const id = 's-' + hex(8);
  S.local.set(id, Date.now() / 1000);
  select(id);
  composer.focus();
}

/* ---------- Turn state ---------- */
function liveStatus() {
  const t = document.body.dataset.turn;
  return t === 'waiting' ? 'suspended' : t === 'running' ? 'running' : S.status;
}
function setTurn(state) {
  document.body.dataset.turn = state;
  const st = liveStatus();
  setBadge($('#status'), st);
  $('#cancel').disabled = state === 'idle';
  const waiting = state === 'waiting';
  composer.disabled = waiting;
  $('#send').disabled = waiting;
  const note = $('#composer-note');
  note.classList.toggle('block', waiting);
  note.textContent = waiting
    ? 'Waiting for approval — approve or deny the request above (or cancel the turn) before sending.'
    : state === 'running' ? 'Enter to send (queued after the running turn) · Esc cancels the turn'
    : 'Enter to send · Shift+Enter for a new line';
  const cur = document.querySelector(`#sessions [data-session="${S.sid}"] .badge`);
  if (cur) setBadge(cur, st);
}
function setBadge(n, st) { n.textContent = STATUS_TEXT[st] || st; n.dataset.status = st; }
function settle() { setTurn(S.pending ? 'waiting' : S.turn ? 'running' : 'idle'); }

/* ---------- Transcript rendering ---------- */
function add(node, before) {
  // Follow the conversation only if the reader is already at the bottom.
  const atEnd = T.scrollHeight - T.scrollTop - T.clientHeight < 80;
  const empty = T.querySelector('.empty');
  if (empty) empty.remove();
  T.insertBefore(node, before || null);
  if (atEnd) T.scrollTop = T.scrollHeight;
  return node;
}
function addUser(text, turnId, by) {
  if (by && S.info && by !== S.info.principal) add(el('div', 'by', 'from ' + by));
  return add(el('div', 'msg user', text, { 'data-turn': turnId || '' }));
}
function addAssistant(text, turnId) {
  if (turnId) S.texted.set(turnId, text);
  const n = el('div', 'msg assistant md', null, { 'data-turn': turnId || '' });
  Markdown.render(n, text);
  return add(n);
}
function addProgress(text, turnId) { return add(el('div', 'progress', text, { 'data-turn': turnId || '' })); }
function addNote(text, kind, before) { return add(el('div', 'note' + (kind ? ' ' + kind : ''), text), before); }

function fmtInput(input) {
  if (input == null || typeof input !== 'object') return input == null ? '' : short(JSON.stringify(input), 80);
  return Object.entries(input).map(([k, v]) => `${k}: ${short((typeof v === 'string' ? v : JSON.stringify(v)).replace(/\s+/g, ' '), 60)}`).join(', ');
}
function toolKey(turnId, callId) { return `${turnId || ''} ${callId}`; }
function addTool(callId, name, input, turnId) {
  const key = toolKey(turnId, callId);
  if (callId && S.tools.has(key)) return S.tools.get(key);
  const n = el('div', 'tool-line', null, { title: JSON.stringify(input), 'data-turn': turnId || '', 'data-call': callId || '' });
  n.append(el('span', 'call', `→ ${name}(${fmtInput(input)})`), el('span', 'res', '…'));
  if (callId) S.tools.set(key, n);
  return add(n);
}
// What a running tool says of its progress: live only, gone once the call ends.
function toolProgress(turnId, callId, text) {
  const n = S.tools.get(toolKey(turnId, callId));
  if (!n) return;
  let said = n.querySelector('.said');
  if (!said) { said = el('span', 'said'); n.append(said); }
  said.textContent = text;
}
function toolResult(turnId, callId, kind, text) {
  const n = S.tools.get(toolKey(turnId, callId));
  if (!n) return;
  const progress = n.querySelector('.said');
  if (progress && kind !== 'run' && kind !== 'wait') progress.remove();
  const r = n.querySelector('.res');
  if (text && typeof text === 'object' && text.cancelled === true) kind = 'cancelled';
  r.className = 'res ' + kind;
  const said = typeof text === 'string' ? text : JSON.stringify(text);
  r.textContent = kind === 'ok' ? '✓ done' : kind === 'err' ? '✗ ' + short(said || 'error', 240)
    : kind === 'wait' ? '… waiting for approval' : kind === 'cancelled' ? '✗ cancelled' : '…';
  if (kind === 'ok' && text != null) r.title = short(typeof text === 'string' ? text : JSON.stringify(text), 500);
}

function emptyView() {
  const box = el('div', 'empty');
  box.append(el('p', 'empty-title', 'No messages yet'), el('p', 'empty-hint', 'Write below, or try one of these:'));
  const list = el('div', 'suggestions');
  for (const text of SUGGESTIONS) list.append(el('button', 'suggestion', text, { type: 'button', 'data-suggestion': text }));
  box.append(list);
  return box;
}
function clearView() {
  T.replaceChildren(emptyView());
  S.pinned = true;
  S.bubble = null; S.progress = null; S.tools.clear(); S.texted.clear(); S.ended.clear(); S.asked.clear();
  hideApproval();
}

function renderHistory(sess, messages) {
  // what this tab sent while the snapshot was read: the snapshot may not hold it yet
  const known = new Set(messages.map((m) => m.turn_id));
  const sent = [...T.querySelectorAll('.msg.user')].filter((n) => {
    const tid = n.dataset.turn;
    return S.mine.has(tid) && !S.ended.has(tid) && !known.has(tid);
  });
  clearView();
  for (const m of messages) {
    if (m.role === 'user') addUser(m.text, m.turn_id, m.user);
    else if (m.role === 'trigger') addNote(`⚡ ${m.by ? m.by + ': ' : ''}${m.text}`);
    else if (m.role === 'assistant') {
      for (const p of m.progress || []) addProgress(p, m.turn_id);
      if (m.text) addAssistant(m.text, m.turn_id);
      for (const c of m.tool_calls || []) {
        if (c.note) addProgress(c.note, m.turn_id);
        addTool(c.id, c.name, c.input, m.turn_id);
      }
    } else if (m.role === 'tool') toolResult(m.turn_id, m.call_id, m.is_error ? 'err' : 'ok', m.result);
  }
  for (const n of sent) add(n);
  // The transcript keeps messages only: say which turns ended badly, after their last line.
  const retried = new Set((sess.turns || []).map((t) => t.retry_of).filter(Boolean));
  for (const t of sess.turns || []) {
    if (!ENDED_TEXT[t.status]) continue;
    const last = [...T.querySelectorAll(`[data-turn="${CSS.escape(t.turn_id)}"]`)].pop();
    if (!last) continue;
    const note = addNote(endingText(t.status, t), t.status === 'cancelled' ? '' : 'error', last.nextSibling);
    if (t.status !== 'cancelled' && !retried.has(t.turn_id)) offerRetry(note, t.turn_id);
  }
  const p = sess.pending;
  if (p) {
    // The pending request names its tool, not its call: mark that tool's unanswered line.
    const lines = [...T.querySelectorAll(`.tool-line[data-turn="${CSS.escape(p.turn_id)}"]`)].filter((n) => n.querySelector('.res').textContent === '…');
    const line = lines.reverse().find((n) => !p.tool || n.querySelector('.call').textContent.startsWith(`→ ${p.tool}(`));
    if (line) p.call_id = line.dataset.call;
    S.queued = (p.others || []).map((o) => Object.assign({ turn_id: p.turn_id }, o));
    showRequest(p);
  }
}

/* ---------- Approval ---------- */
function hideApproval() { const a = $('#approval'); if (a) a.remove(); }
function showRequest(req) {
  S.pending = req;
  S.asked.add(req.turn_id);
  if (req.call_id) toolResult(req.turn_id, req.call_id, 'wait');
  hideApproval();
  const card = el('div', '', null, { id: 'approval', role: 'group', 'aria-label': 'Approval request', tabindex: '-1' });
  card.append(el('div', 'head', 'Approval needed' + (req.tool ? ` · ${req.tool}` : '')), el('p', 'prompt', req.prompt || 'The agent asks for approval.'));
  const actions = el('div', 'actions');
  const who = req.answerers && req.answerers.kind === 'user' ? req.answerers.user : null;
  const mine = !who || !S.info || who === S.info.principal;
  const yes = el('button', 'primary', 'Approve', { type: 'button', 'data-answer': 'approve' });
  if (mine) actions.append(yes, el('button', '', 'Deny', { type: 'button', 'data-answer': 'deny' }));
  else actions.append(el('span', 'expires', `waiting for ${who} to answer`));
  if (req.expires_at) actions.append(el('span', 'expires', 'expires ' + new Date(req.expires_at * 1000).toLocaleTimeString()));
  card.append(actions, el('p', 'card-err', null, { role: 'alert' }));
  card.addEventListener('click', (e) => {
    const b = e.target.closest('button[data-answer]');
    if (b) answer(req, b.dataset.answer === 'approve', card);
  });
  $('#approval-slot').append(card);
  setTurn('waiting');
  revealAsked(req);
  // the card, not Approve: a key typed as it appears must not decide anything (Tab reaches it)
  card.focus({ preventScroll: true });
}
// The card takes its room from the transcript: keep what it asks about in view above it.
function revealAsked(req) {
  const asking = req.call_id && S.tools.get(toolKey(req.turn_id, req.call_id));
  const last = asking || [...T.querySelectorAll(`[data-turn="${CSS.escape(req.turn_id)}"]`)].pop();
  if (!last) { T.scrollTop = T.scrollHeight; return; }
  const line = last.getBoundingClientRect(), view = T.getBoundingClientRect();
  if (line.bottom > view.bottom - 8) T.scrollTop += line.bottom - view.bottom + 12;
  else if (line.top < view.top) T.scrollTop -= view.top - line.top + 12;
  S.pinned = T.scrollHeight - T.scrollTop - T.clientHeight < 80;
}
async function answer(req, value, card) {
  const buttons = card.querySelectorAll('button');
  buttons.forEach((b) => { b.disabled = true; });
  card.querySelector('.card-err').textContent = '';
  try {
    await api('POST', `/sessions/${S.sid}/turns/${encodeURIComponent(req.turn_id)}/resume`, { input_id: req.id, value });
    if (S.pending !== req) return;
    S.pending = null;
    S.turn = req.turn_id;
    card.remove();
    if (req.call_id) toolResult(req.turn_id, req.call_id, 'run');
    const next = (S.queued || []).shift();
    if (next) { showRequest(next); return; }  // the turn waits until every card is answered
    setTurn('running');
    composer.focus();
  } catch (e) {
    if (!card.isConnected) return;
    card.querySelector('.card-err').textContent = e.message;  // e.g. 403: you may not answer this
    buttons.forEach((b) => { b.disabled = false; });
  }
}

/* ---------- Events ---------- */
function onEvent(type, d) {
  const tid = d.turn_id;
  if (d.via) {
    // a sub-agent's step, delegated by turn d.via: its calls show there; its words are
    // that call's result, and its requests that turn's own
    const call = tid + ':' + d.call_id;
    if (type === 'action.requested') addTool(call, d.agent + ': ' + d.name, d.input, d.via);
    else if (type === 'action.completed') toolResult(d.via, call, d.error ? 'err' : 'ok', d.error || d.result);
    return;
  }
  switch (type) {
    case 'turn.started':
      S.turn = tid;
      if (S.bubble && S.bubble.turn === tid) { S.bubble.el.remove(); S.bubble = null; }
      if (d.trigger === 'resume' && S.pending && S.pending.turn_id === tid) { S.pending = null; hideApproval(); }
      if (d.trigger === 'inbound' && !S.mine.has(tid) && !T.querySelector(`.msg.user[data-turn="${CSS.escape(tid)}"]`)) fillForeign(tid);
      if (d.trigger === 'proactive') addNote('↻ The agent started a turn on its own');
      settle();
      break;
    case 'reasoning.delta': {
      // what the model writes between tool calls: a line of progress while tools run
      let p = S.progress;
      if (!p || p.turn !== tid || p.closed || (d.attempt || 0) !== p.attempt) {
        if (p && p.turn === tid && !p.closed && (d.attempt || 0) > p.attempt) p.el.remove();
        p = S.progress = { el: addProgress('', tid), turn: tid, attempt: d.attempt || 0 };
      }
      const atEnd = T.scrollHeight - T.scrollTop - T.clientHeight < 80;
      p.el.append(d.text || '');
      if (atEnd) T.scrollTop = T.scrollHeight;
      break;
    }
    case 'message.delta': {
      if (S.progress) S.progress.closed = true;
      let b = S.bubble;
      if (!b || b.turn !== tid) {
        // aria-busy: screen readers wait for the final text instead of reading every delta
        const n = add(el('div', 'msg assistant md streaming', null, { 'aria-busy': 'true', 'data-turn': tid }));
        b = S.bubble = { el: n, turn: tid, attempt: d.attempt || 0, raw: '', drawing: false };
      }
      if ((d.attempt || 0) > b.attempt) { b.raw = ''; b.attempt = d.attempt; }
      b.raw += d.text || '';
      drawBubble(b);
      break;
    }
    case 'message.completed': finishBubble(tid, d.text, true); break;
    case 'action.requested': {
      // the note that introduces the call goes with it; the live line kept what streamed
      // (a step with several calls streamed all their notes into one line: each leaves it)
      const p = S.progress;
      if (p && p.turn === tid) {
        p.closed = true;
        if (d.note) {
          const left = p.el.textContent.replace(d.note, '');
          if (left.trim()) p.el.textContent = left; else p.el.remove();
        }
      }
      if (d.note) addProgress(d.note, tid);
      addTool(d.call_id, d.name, d.input, tid);
      break;
    }
    case 'action.progress': toolProgress(tid, d.call_id, d.text); break;
    case 'turn.steered':  // a follow-up the turn at work took in (a steering Slack channel)
      addUser(d.text, tid, d.by);
      addNote('Taken in by the reply at work');
      break;
    case 'action.completed':
      toolResult(tid, d.call_id, d.error ? 'err' : 'ok', d.error || d.result);
      // Answered somewhere else (another tab, Slack): the card is stale.
      if (S.pending && S.pending.call_id === d.call_id) { S.pending = null; hideApproval(); S.turn = tid; settle(); }
      break;
    case 'input.requested':
      // calls of one step may each ask: their cards come one after another
      S.queued = (d.others || []).map((o) => Object.assign({ turn_id: tid }, o));
      showRequest(Object.assign({ turn_id: tid }, d.request)); refreshList(); break;
    case 'turn.completed':
      finishBubble(tid, d.text, false);
      if (d.text && S.texted.get(tid) !== d.text) addAssistant(d.text, tid);  // its message.completed was missed
      endTurn(tid, 'idle');
      break;
    case 'turn.failed':
      finishBubble(tid, null, false);
      offerRetry(addNote(endingText('failed', d), 'error'), tid);
      endTurn(tid, 'failed');
      break;
    case 'turn.cancelled':
      finishBubble(tid, null, false);
      markCancelledTools(tid);
      addNote(endingText('cancelled', d));
      endTurn(tid, 'idle');
      break;
    case 'turn.interrupted':
      finishBubble(tid, null, false);
      offerRetry(addNote(endingText('interrupted', d), 'error'), tid);
      endTurn(tid, 'idle');
      break;
    default: break;  // future types: nothing to show
  }
}
// A streaming reply is drawn again as Markdown once a frame, however many deltas came.
function drawBubble(b) {
  if (b.drawing) return;
  b.drawing = true;
  requestAnimationFrame(() => {
    b.drawing = false;
    if (S.bubble !== b) return;  // finished meanwhile: finishBubble drew its last text
    const atEnd = T.scrollHeight - T.scrollTop - T.clientHeight < 80;
    Markdown.render(b.el, b.raw);
    if (atEnd) T.scrollTop = T.scrollHeight;
  });
}
function finishBubble(tid, text, final) {
  const b = S.bubble;
  if (b && b.turn === tid) {
    S.bubble = null;
    b.el.classList.remove('streaming');
    b.el.removeAttribute('aria-busy');
    if (text) { Markdown.render(b.el, text); S.texted.set(tid, text); }
    else if (final || !b.raw) b.el.remove();
    else { Markdown.render(b.el, b.raw); b.el.classList.add('partial'); }  // what streamed before a failure or cancel
  } else if (final && text) addAssistant(text, tid);
}
function markCancelledTools(tid) {
  for (const [key, n] of S.tools) {
    const r = n.querySelector('.res');
    if (key.startsWith(tid + ' ') && (r.textContent === '… waiting for approval' || r.textContent === '…')) toolResult(tid, n.dataset.call, 'cancelled');
  }
}
function endTurn(tid, status) {
  S.ended.add(tid);
  if (S.turn === tid) S.turn = null;
  if (S.pending && S.pending.turn_id === tid) { S.pending = null; hideApproval(); }
  S.status = status;
  settle();
  refreshList();
}
async function fillForeign(tid) {
  // A turn started elsewhere (Slack, another tab): its opening text is only in the session's turns.
  const slot = addUser('…', tid);
  try {
    const s = await api('GET', `/sessions/${S.sid}`);
    const t = (s.turns || []).find((x) => x.turn_id === tid);
    if (t && t.text) { slot.textContent = t.text; if (t.by && t.by !== S.info.principal) slot.before(el('div', 'by', 'from ' + t.by)); }
    else slot.remove();
  } catch (e) { slot.remove(); }
}

/* ---------- SSE over fetch ---------- */
function setConn(state, label) { $('#conn').dataset.state = state; $('#conn').textContent = label; }
function stopStream() { S.streamGen++; if (S.abort) S.abort.abort(); S.abort = null; }
function startStream(after) {
  stopStream();
  S.lastInt = S.deltaBase = after || 0;
  S.lastRaw = String(after || 0);
  S.deltaN = 0;
  streamLoop(S.sid, S.streamGen);
}
function kickStream() { if (S.wake) S.wake(); }  // skip the backoff wait, e.g. right after sending

async function streamLoop(sid, gen) {
  let delay = 500;
  setConn('reconnecting', 'connecting…');
  while (gen === S.streamGen) {
    const ctrl = new AbortController();
    S.abort = ctrl;
    let notYet = false;
    try {
      const res = await fetch(`/api/sessions/${sid}/events`, {
        headers: Object.assign({ Accept: 'text/event-stream', 'Last-Event-ID': S.lastRaw }, authHeaders()),
        cache: 'no-store', signal: ctrl.signal,
      });
      if (res.status === 401) { askToken(S.token ? 'That token was not accepted.' : ''); return; }
      if (res.status === 404) notYet = true;  // a new session the server hasn't seen a message for
      else if (!res.ok || !res.body) throw new Error('HTTP ' + res.status);
      else {
        setConn('live', 'live');
        delay = 500;
        await readSSE(res.body, gen);
      }
    } catch (e) { /* network drop: reconnect below */ }
    if (gen !== S.streamGen) return;
    if (notYet) {  // nothing to follow until the first message creates it: poll only while sending
      setConn('live', 'new session');
      await sleep(S.sending ? 100 : 10000);
      continue;
    }
    setConn('reconnecting', 'reconnecting…');
    await sleep(delay);
    delay = Math.min(delay * 2, 10000);
  }
}

async function readSSE(body, gen) {
  const reader = body.pipeThrough(new TextDecoderStream()).getReader();
  let buf = '', ev = { id: null, event: '', data: [] };
  for (;;) {
    const { value, done } = await reader.read();
    if (done || gen !== S.streamGen) { reader.cancel().catch(() => {}); return; }
    buf += value;
    let m;
    while ((m = /\r\n|\r|\n/.exec(buf))) {
      if (m[0] === '\r' && m.index === buf.length - 1) break;  // maybe half of a \r\n split across chunks
      const line = buf.slice(0, m.index);
      buf = buf.slice(m.index + m[0].length);
      if (line === '') {
        if (ev.data.length && gen === S.streamGen) dispatch(ev);
        ev = { id: null, event: '', data: [] };
      } else if (line[0] !== ':') {  // ':' lines are comments / keep-alives
        const i = line.indexOf(':');
        const field = i < 0 ? line : line.slice(0, i);
        let v = i < 0 ? '' : line.slice(i + 1);
        if (v[0] === ' ') v = v.slice(1);
        if (field === 'data') ev.data.push(v);
        else if (field === 'event') ev.event = v;
        else if (field === 'id') ev.id = v;
      }
    }
  }
}

function dispatch(ev) {
  if (ev.event === 'gap') { loadSession(); return; }  // our position was pruned: start from a fresh snapshot
  const id = ev.id;
  if (id) {
    let m;
    if (/^\d+$/.test(id)) {
      const n = Number(id);
      if (n <= S.lastInt) return;  // already applied (replayed on reconnect)
      S.lastInt = S.deltaBase = n;
      S.deltaN = 0;
    } else if ((m = /^(\d+)\.(\d+)$/.exec(id))) {
      const base = Number(m[1]), k = Number(m[2]);
      if (base < S.lastInt || (base === S.deltaBase && k <= S.deltaN)) return;
      S.deltaBase = base;
      S.deltaN = k;
    }
    S.lastRaw = id;
  }
  let data;
  try { data = JSON.parse(ev.data.join('\n')); } catch (e) { return; }
  onEvent(data.type || ev.event, data);
}

/* ---------- Sessions ---------- */
async function select(sid) {
  if (S.local.has(S.sid) && !S.mine.size) S.local.delete(S.sid);  // an untouched new session is not worth listing
  S.sid = sid;
  if (location.hash !== '#' + sid) history.replaceState(null, '', '#' + sid);
  $('#sid').textContent = sid;
  document.title = `${sid} · Turnbot console`;
  S.turn = S.pending = null;
  S.status = 'new';
  S.mine.clear();
  clearView();
  settle();
  renderList();
  await loadSession();
}

async function loadSession() {
  const sid = S.sid, gen = ++S.loadGen;
  stopStream();
  let sess, tr;
  try {
    // the transcript first: the stream starts at its position, and the session read after
    // it is as new or newer, so nothing falls between the two
    tr = await api('GET', `/sessions/${sid}/transcript`);
    sess = await api('GET', `/sessions/${sid}`);
  } catch (e) {
    if (gen !== S.loadGen) return;
    if (e.status === 404) { sess = { status: 'new', turns: [], pending: null, last_event_id: 0 }; tr = { messages: [] }; }
    else {
      if (e.status !== 401) { addNote(`Could not load ${sid}: ${e.message} — retrying…`, 'error'); setTimeout(() => { if (gen === S.loadGen) loadSession(); }, 3000); }
      return;
    }
  }
  if (gen !== S.loadGen) return;
  S.status = sess.status === 'suspended' || sess.status === 'running' ? 'idle' : sess.status || 'idle';
  S.pending = null;
  const open = (sess.turns || []).filter((t) => ['queued', 'running', 'suspended'].includes(t.status));
  S.turn = open.length ? open[open.length - 1].turn_id : null;
  if (sess.status === 'running' && !S.turn) S.turn = '?';
  renderHistory(sess, tr.messages || []);
  settle();
  T.scrollTop = T.scrollHeight;
  // the transcript's position: the stream then shows none of its messages again
  startStream(tr.last_event_id ?? sess.last_event_id ?? 0);
}

/* ---------- Actions ---------- */
async function send() {
  const text = composer.value.trim();
  if (!text || composer.disabled || !S.sid) return;
  const sid = S.sid, tid = 't-' + hex(12);
  S.mine.add(tid);
  composer.value = '';
  autosize();
  const bubble = addUser(text, tid);
  T.scrollTop = T.scrollHeight;
  const wasTurn = S.turn;
  if (!S.turn) S.turn = tid;
  settle();
  S.sending++;
  kickStream();  // a brand-new session's stream may have been told 404
  try {
    // admitted, not awaited: the reply comes on the event stream. A dropped connection is
    // asked again with the same turn id, which the server never runs twice.
    for (let attempt = 0; ; attempt++) {
      try { await api('POST', `/sessions/${sid}/turns`, { text, turn_id: tid, wait: false }); break; }
      catch (e) { if (e.status !== 0 || attempt >= 3) throw e; await new Promise((r) => setTimeout(r, 500 * 2 ** attempt)); }
    }
    if (sid !== S.sid) return;
    S.local.delete(sid);
    // if the stream is down, catch up from a snapshot once
    setTimeout(() => {
      if (sid === S.sid && $('#conn').dataset.state !== 'live' && !S.ended.has(tid)) loadSession();
    }, 1500);
  } catch (e) {
    if (sid !== S.sid) return;
    bubble.classList.add('failed');
    addNote('Not sent: ' + e.message, 'error', bubble.nextSibling);
    if (!composer.value) { composer.value = text; autosize(); }
    if (S.turn === tid) S.turn = wasTurn;
    settle();
  } finally { S.sending--; }
}

async function cancelTurn() {
  const tid = S.turn || (S.pending && S.pending.turn_id);
  if (!tid || tid === '?') { loadSession(); return; }
  const sid = S.sid;
  $('#cancel').disabled = true;
  try {
    const r = await api('POST', `/sessions/${sid}/turns/${encodeURIComponent(tid)}/cancel`, {});
    setTimeout(() => { if (sid === S.sid && !S.ended.has(tid) && (r.cancelled === false || document.body.dataset.turn !== 'idle')) loadSession(); }, 1500);
  } catch (e) {
    addNote('Could not cancel: ' + e.message, 'error');
    settle();
  }
}

/* ---------- A failure, in words ---------- */
const INTERRUPTED_WHY = {
  timeout: 'it took longer than a turn may',
  interrupted: 'an operator stopped it',
  held: 'the server went down each time it ran it, so it is held',
  lost: 'the server went down while answering it',
};
const FAILED_WHERE = {
  model: 'The model could not answer',
  tool: 'A tool this reply used failed',
  output: 'The answer did not come out in the form asked for',
};
// what an error's class says, when its message alone would be a program's word
const ERROR_WORDS = [
  [/Timeout|TimedOut/, 'it took too long'],
  [/ConnectionRefused/, 'the service refused the connection'],
  [/ConnectionReset|ConnectionAborted|BrokenPipe|RemoteDisconnected|ServerDisconnected/, 'the connection was cut off'],
  [/Connect|Network|gaierror|DNS/i, 'the service could not be reached'],
  [/Cancelled/, 'it was stopped before it finished'],
  [/Permission|Forbidden|Unauthori[sz]ed|Authentication/, 'it was not allowed'],
  [/Memory/, 'it ran out of memory'],
  [/RateLimit|Overloaded/, 'the service is busy'],
];
const errorWords = (cls) => (ERROR_WORDS.find(([re]) => re.test(cls)) || [])[1];
/** A turn's failure as a person reads it: where it failed, then why, with no class names. */
function failureText(error, phase) {
  const where = FAILED_WHERE[phase] || 'This reply could not be finished';
  let why = String(error || '').trim();
  // "ConnectionResetError: [Errno 104] Connection reset by peer": a class, then its message
  const m = /^([A-Za-z_][\w.]*(?:Error|Exception|Exit|Interrupt|Warning|Timeout|Failure))(?::\s*([\s\S]*))?$/.exec(why);
  if (m) {
    const said = (m[2] || '').replace(/^\[Errno -?\d+\]\s*/, '').trim();
    const words = errorWords(m[1].split('.').pop()) || 'something went wrong inside the agent';
    why = words + (said && !/^\d+$/.test(said) ? ` (${said})` : '');
  }
  // a class named inside the message ("the reply stream broke: ReadError"): its words, or nothing
  why = why.replace(/(:\s*)?\b([A-Z][A-Za-z0-9]*(?:Error|Exception))\b/g, (_, colon, cls) => {
    const words = errorWords(cls);
    return words ? (colon ? ': ' : '') + words : '';
  });
  why = why.replace(/[.:\s]+$/, '');
  return why ? `${where}: ${why}.` : `${where}.`;
}

/** How a turn that did not complete ended, in words: live (its event) or reloaded (its record). */
function endingText(status, ended) {
  if (status === 'failed') return ended.error ? failureText(ended.error, ended.phase) : ENDED_TEXT.failed;
  if (status === 'cancelled') return 'Turn cancelled' + (ended.reason ? ': ' + ended.reason : '');
  const why = ended.detail || INTERRUPTED_WHY[ended.reason];
  return why ? `This reply was interrupted: ${why}` : ENDED_TEXT.interrupted;
}

// A failed or interrupted turn may be asked again: a new turn with the same input.
function offerRetry(note, tid) {
  const button = el('button', 'retry', 'Retry', { type: 'button', 'data-retry': tid, title: 'Ask the same question again as a new turn' });
  button.addEventListener('click', () => retryTurn(tid, button));
  note.append(button);
}
async function retryTurn(tid, button) {
  const sid = S.sid;
  button.disabled = true;
  try {
    const r = await api('POST', `/sessions/${sid}/turns/${encodeURIComponent(tid)}/retry`, {});
    button.textContent = 'Retried';
    if (sid === S.sid && !S.ended.has(r.turn_id)) { S.turn = r.turn_id; settle(); }
    kickStream();
  } catch (e) {
    button.disabled = false;
    addNote('Could not retry: ' + e.message, 'error');
  }
}

// Asked in the page (a browser's own dialog would block the page, and some never show one).
function confirmInPage(text) {
  const dialog = $('#confirm');
  $('#confirm-text').textContent = text;
  dialog.returnValue = '';
  dialog.showModal();
  return new Promise((resolve) => {
    dialog.addEventListener('close', () => resolve(dialog.returnValue === 'ok'), { once: true });
  });
}
$('#confirm').addEventListener('click', (e) => {
  const b = e.target.closest('button[value]');
  if (b) $('#confirm').close(b.value);
});

async function resetSession() {
  const sid = S.sid;
  if (!sid || $('#confirm').open) return;
  if (!(await confirmInPage(`Session ${sid} starts over with an empty transcript. This cannot be undone.`))) return;
  try { await api('POST', `/sessions/${sid}/reset`, {}); }
  catch (e) { if (e.status !== 404) { addNote('Could not reset: ' + e.message, 'error'); return; } }
  if (sid !== S.sid) return;
  S.mine.clear();  // what this tab sent is gone with the transcript
  await loadSession();
  refreshList();
}

function autosize() {
  composer.style.height = 'auto';
  composer.style.height = Math.min(composer.scrollHeight + 2, 200) + 'px';
}

/* ---------- Wiring ---------- */
$('#composer-form').addEventListener('submit', (e) => { e.preventDefault(); send(); });
composer.addEventListener('input', autosize);
composer.addEventListener('keydown', (e) => {
  if (e.key === 'Enter' && !e.shiftKey && !e.isComposing) { e.preventDefault(); send(); }
});
$('#new-session').addEventListener('click', newSession);
$('#cancel').addEventListener('click', cancelTurn);
$('#reset').addEventListener('click', resetSession);
T.addEventListener('click', (e) => {
  const b = e.target.closest('button[data-suggestion]');
  if (b && !composer.disabled) { composer.value = b.dataset.suggestion; autosize(); send(); }
});
// the transcript follows its end while the reader is there, also as it shrinks (a card, a keyboard)
T.addEventListener('scroll', () => { S.pinned = T.scrollHeight - T.scrollTop - T.clientHeight < 80; }, { passive: true });
new ResizeObserver(() => { if (S.pinned) T.scrollTop = T.scrollHeight; }).observe(T);

/* ---------- Narrow screens: the sessions slide in over the page ---------- */
function openDrawer(open) {
  document.body.dataset.drawer = open ? 'open' : '';
  $('#menu').setAttribute('aria-expanded', String(open));
  $('main').inert = open;  // Tab stays in the sessions while they cover the page
  if (open) $('#sidebar').querySelector('button').focus();
}
matchMedia('(max-width: 640px)').addEventListener('change', () => openDrawer(false));
$('#menu').addEventListener('click', () => openDrawer(document.body.dataset.drawer !== 'open'));
$('#scrim').addEventListener('click', () => openDrawer(false));
$('#sidebar').addEventListener('click', (e) => { if (e.target.closest('button')) openDrawer(false); });

document.addEventListener('keydown', (e) => {
  if (!$('#auth').hidden || $('#confirm').open) return;  // the token form or a question first: no shortcut acts behind it
  if (e.key === 'Escape' && document.body.dataset.drawer === 'open') { openDrawer(false); $('#menu').focus(); return; }
  const k = e.key.toLowerCase();
  if (((e.ctrlKey || e.metaKey) && k === 'k') || (e.altKey && e.code === 'KeyN')) { e.preventDefault(); newSession(); }
  // Esc cancels wherever the focus is: while a request waits, the composer is disabled
  else if (e.key === 'Escape' && document.body.dataset.turn !== 'idle') { e.preventDefault(); cancelTurn(); }
});
// a hidden tab lets its stream go (browsers allow a few connections per host) and
// catches up from its last id when shown again
document.addEventListener('visibilitychange', () => {
  if (document.hidden) { stopStream(); setConn('reconnecting', 'paused'); }
  else if (S.sid && $('#auth').hidden) { stopStream(); streamLoop(S.sid, S.streamGen); }
});
window.addEventListener('hashchange', () => {
  const id = decodeURIComponent(location.hash.slice(1));
  if (ID_RE.test(id) && id !== S.sid) select(id);
});

function renderInfo() {
  const i = S.info;
  $('#model').textContent = i.offline ? 'Offline demo model' : i.model;
  $('#model-hint').textContent = i.offline ? 'set ANTHROPIC_API_KEY for Claude' : `answering as ${i.agent}`;
  $('#model').title = i.offline ? 'Replies come from the built-in demonstration model, not Claude.' : 'Model answering in this session';
}

async function boot() {
  try { S.info = await api('GET', '/info'); }
  catch (e) {
    if (e.status === 401) return;  // the token form is up; it calls boot() again
    $('#model').textContent = 'server unreachable';
    setConn('reconnecting', 'reconnecting…');
    setTimeout(boot, 3000);
    return;
  }
  renderInfo();
  await refreshList();
  const want = decodeURIComponent(location.hash.slice(1));
  const sid = ID_RE.test(want) ? want : S.sid || (S.list[0] && S.list[0].session);
  if (sid) select(sid); else newSession();
  if (!S.booted) { S.booted = true; setInterval(refreshList, 10000); }
}
clearView();
boot();
