// tide Studio: the session, the API client, a tiny DOM builder and the
// router. Pages (computes.js, jobs.js, cost.js) register themselves in
// Studio.pages. Every call goes to the same /v1 API as the CLI; the browser
// sends the token in its HttpOnly cookie and this script adds the CSRF
// header to every request.
'use strict';

const Studio = {
  csrf: '',
  ws: localStorage.getItem('tide.workspace') || 'default',
  pages: [],
  cleanups: [],
};

class ApiError extends Error {
  constructor(status, problem) {
    super(problem.detail || problem.title || ('HTTP ' + status));
    this.status = status;
    this.problem = problem;
  }
}

// h builds an element: h('a', {href: '#/x', class: 'c'}, 'text', child).
// Text is always set as text, never parsed as HTML.
function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith('on')) el.addEventListener(k.slice(2), v);
    else if (k === 'value') el.value = v;
    else el.setAttribute(k, v === true ? '' : v);
  }
  for (const c of children.flat(Infinity)) {
    if (c === undefined || c === null || c === false) continue;
    el.append(c instanceof Node ? c : String(c));
  }
  return el;
}

// api calls the REST API. path starting with / is absolute; otherwise it is
// relative to the current workspace.
async function api(method, path, body, opts) {
  opts = opts || {};
  const url = path.startsWith('/') ? path : '/v1/workspaces/' + encodeURIComponent(Studio.ws) + '/' + path;
  const headers = Object.assign({'X-Tide-CSRF': Studio.csrf, 'Accept': opts.accept || 'application/json'}, opts.headers);
  if (body !== undefined) headers['Content-Type'] = opts.type || 'application/json';
  const resp = await fetch(url, {
    method, headers, credentials: 'same-origin',
    body: body === undefined ? undefined : (typeof body === 'string' ? body : JSON.stringify(body)),
  });
  if (resp.status === 401) {
    const p = await resp.json().catch(() => ({}));
    signIn(p.detail || 'your session ended');
    throw new ApiError(401, p);
  }
  if (!resp.ok) {
    const p = await resp.json().catch(() => ({detail: resp.statusText}));
    throw new ApiError(resp.status, p);
  }
  if (resp.status === 204 || resp.status === 202 && resp.headers.get('Content-Length') === '0') return null;
  const text = await resp.text();
  if (opts.accept) return {text, etag: resp.headers.get('ETag')};
  return text ? JSON.parse(text) : null;
}

const main = () => document.getElementById('main');

function render(...nodes) {
  const m = main();
  m.replaceChildren(...nodes);
}

// onLeave registers what to stop (timers, streams) when the page changes.
function onLeave(fn) { Studio.cleanups.push(fn); }

// follow keeps part of a page current: fn gets the API's answer at path
// now and each time it changes, from the route's server-sent events (a
// GET with Accept: text/event-stream; docs/studio.md). A problem (the
// resource deleted, access lost) goes to onProblem and ends the stream. A
// stream refused outright (a session that ended) is asked once as a plain
// call, which shows the sign-in page on 401, and tried again in 3 s.
function follow(path, fn, onProblem) {
  const url = path.startsWith('/') ? path : '/v1/workspaces/' + encodeURIComponent(Studio.ws) + '/' + path;
  let es, stopped = false, timer;
  const take = async v => { try { await fn(v); } catch (e) { console.warn(e); } };
  const open = () => {
    es = new EventSource(url);
    es.addEventListener('update', ev => take(JSON.parse(ev.data)));
    es.addEventListener('problem', ev => {
      es.close();
      const p = JSON.parse(ev.data);
      if (onProblem) onProblem(new ApiError(p.status, p)); else console.warn(p.detail);
    });
    es.onerror = () => {
      if (stopped || es.readyState !== EventSource.CLOSED) return;
      api('GET', path).then(take, e => { if (onProblem && e.status !== 401) onProblem(e); });
      timer = setTimeout(() => { if (!stopped) open(); }, 3000);
    };
  };
  open();
  const stop = () => { stopped = true; clearTimeout(timer); es.close(); };
  onLeave(stop);
  return stop;
}

// every runs fn now and then every ms until the page changes; a failed
// call shows its error in place and keeps polling.
function every(ms, fn) {
  let stopped = false, timer;
  const tick = async () => {
    try { await fn(); } catch (e) { if (!(e instanceof ApiError && e.status === 401)) console.warn(e); }
    if (!stopped) timer = setTimeout(tick, ms);
  };
  tick();
  onLeave(() => { stopped = true; clearTimeout(timer); });
}

function errorBox(e) {
  return h('p', {class: 'error', role: 'alert'}, e instanceof Error ? e.message : String(e));
}

function fmtTime(t) {
  if (!t) return '';
  const d = new Date(t);
  return d.toLocaleString(undefined, {dateStyle: 'short', timeStyle: 'medium'});
}

function fmtDuration(sec) {
  if (sec === undefined || sec === null || isNaN(sec)) return '';
  sec = Math.max(0, Math.round(sec));
  const d = Math.floor(sec / 86400), hh = Math.floor(sec % 86400 / 3600), m = Math.floor(sec % 3600 / 60), s = sec % 60;
  if (d) return d + 'd ' + hh + 'h';
  if (hh) return hh + 'h ' + m + 'm';
  if (m) return m + 'm ' + s + 's';
  return s + 's';
}

function money(v, cur) {
  if (v === undefined || v === null) return '';
  return v.toFixed(v < 1 ? 4 : 2) + (cur ? ' ' + cur : '');
}

function badge(state) {
  return h('span', {class: 'badge s-' + String(state || 'unknown').toLowerCase()}, state || 'unknown');
}

// table builds a scrollable table; rows are arrays of cells.
function table(head, rows, empty) {
  if (!rows.length) return h('p', {class: 'empty'}, empty);
  return h('div', {class: 'scroll'}, h('table', {},
    h('thead', {}, h('tr', {}, head.map(c => h('th', {scope: 'col'}, c)))),
    h('tbody', {}, rows.map(r => h('tr', {}, r.map(c => h('td', {}, c)))))));
}

// kv is a definition list of label/value pairs (empty values left out).
function kv(pairs) {
  return h('dl', {class: 'kv'}, pairs.filter(p => p[1] !== '' && p[1] !== undefined && p[1] !== null)
    .map(([k, v]) => [h('dt', {}, k), h('dd', {}, v)]));
}

// showFieldErrors marks the inputs a problem names and prints its messages.
function showFieldErrors(form, e, withLines) {
  form.querySelectorAll('.invalid').forEach(el => el.classList.remove('invalid'));
  form.querySelectorAll('.field-error').forEach(el => el.remove());
  const out = form.querySelector('.form-errors');
  if (!e) { out.replaceChildren(); return; }
  const p = e.problem || {};
  const list = (p.errors && p.errors.length) ? p.errors : [{field: p.field, message: e.message}];
  out.replaceChildren(...list.map(f => h('li', {}, (withLines && f.line ? 'line ' + f.line + ': ' : '') + (f.field ? f.field + ': ' : '') + f.message)));
  for (const f of list) {
    if (!f.field) continue;
    const top = f.field.split(/[.[]/)[0];
    const input = form.querySelector('[name="' + CSS.escape(top) + '"]');
    if (input) {
      input.classList.add('invalid');
      input.setAttribute('aria-invalid', 'true');
      input.after(h('span', {class: 'field-error'}, f.message));
    }
  }
}

function signIn(reason) {
  for (const f of Studio.cleanups.splice(0)) f();
  document.body.classList.add('signed-out');
  const input = h('input', {type: 'password', name: 'token', id: 'token', autocomplete: 'current-password', required: true});
  const form = h('form', {class: 'card signin', onsubmit: async ev => {
    ev.preventDefault();
    const resp = await fetch('/studio/signin', {method: 'POST', credentials: 'same-origin',
      body: new URLSearchParams({token: input.value})});
    const body = await resp.json().catch(() => ({}));
    if (!resp.ok) {
      form.querySelector('.form-errors').replaceChildren(h('li', {}, body.detail || resp.statusText));
      return;
    }
    Studio.csrf = body.csrf;
    document.body.classList.remove('signed-out');
    await loadWorkspaces();
    route();
  }},
  h('h1', {}, 'Sign in to tide Studio'),
  reason ? h('p', {class: 'error', role: 'alert'}, reason) : null,
  h('label', {for: 'token'}, 'API token'), input,
  h('p', {class: 'hint'}, 'The token the CLI uses: "token" in ~/.config/tide/config.json (written by the server on its first start), or your TIDE_TOKEN. It is kept in an HttpOnly cookie; pages never see it.'),
  h('ul', {class: 'form-errors'}),
  h('button', {type: 'submit'}, 'Sign in'));
  render(form);
  input.focus();
}

// loadWorkspaces loads, after every sign-in, who the user is (for can)
// and the workspaces they see.
async function loadWorkspaces() {
  Studio.me = await api('GET', '/v1/whoami').catch(() => null);
  const sel = document.getElementById('workspace');
  try {
    const wss = (await api('GET', '/v1/workspaces')).value;
    if (!wss.some(w => w.name === Studio.ws) && wss.length) Studio.ws = wss[0].name;
    sel.replaceChildren(...wss.map(w => h('option', {value: w.name, selected: w.name === Studio.ws}, w.name)));
  } catch (e) {
    sel.replaceChildren(h('option', {value: Studio.ws}, Studio.ws));
  }
}

// can tells whether the signed-in user's role in the current workspace
// grants perm (a name of internal/service/roles.go, as /v1/whoami lists
// them): Studio shows only the actions a user may take. Unknown (whoami
// failed): shown, and the API answers.
function can(perm) {
  const me = Studio.me;
  if (!me) return true;
  return !!me.admin || ((me.permissions || {})[Studio.ws] || []).includes(perm);
}

function route() {
  for (const f of Studio.cleanups.splice(0)) f();
  const path = (location.hash.replace(/^#\/?/, '') || 'computes').split('?')[0];
  const parts = path.split('/').map(decodeURIComponent);
  for (const a of document.querySelectorAll('#nav a')) {
    a.classList.toggle('active', a.getAttribute('href') === '#/' + parts[0]);
    if (a.getAttribute('href') === '#/' + parts[0]) a.setAttribute('aria-current', 'page'); else a.removeAttribute('aria-current');
  }
  for (const p of Studio.pages) {
    const m = path.match(p.re);
    if (m) {
      // An optional group that did not match stays undefined (decoding
      // it would make it the string "undefined").
      render(h('p', {class: 'loading'}, 'Loading…'));
      Promise.resolve(p.render(...m.slice(1).map(s => s === undefined ? s : decodeURIComponent(s)))).catch(e => {
        if (!(e instanceof ApiError && e.status === 401)) render(errorBox(e));
      });
      return;
    }
  }
  render(h('p', {class: 'empty'}, 'No page ' + path + '. ', h('a', {href: '#/computes'}, 'Go to computes')));
}

async function boot() {
  document.getElementById('workspace').addEventListener('change', ev => {
    Studio.ws = ev.target.value;
    localStorage.setItem('tide.workspace', Studio.ws);
    route();
  });
  document.getElementById('signout').addEventListener('click', async () => {
    await fetch('/studio/signout', {method: 'POST', credentials: 'same-origin', headers: {'X-Tide-CSRF': Studio.csrf}});
    Studio.csrf = '';
    signIn('');
  });
  const resp = await fetch('/studio/session', {credentials: 'same-origin'});
  const body = await resp.json().catch(() => ({}));
  if (!resp.ok) {
    // A browser that never signed in sees the form alone; an expired or
    // deleted token says so.
    signIn(/not signed in/.test(body.detail || '') ? '' : body.detail);
    return;
  }
  Studio.csrf = body.csrf;
  await loadWorkspaces();
  route();
}

window.addEventListener('hashchange', () => { if (Studio.csrf) route(); });
document.addEventListener('DOMContentLoaded', boot);
