// Jobs: the list with filters and a job's page with its live log.
'use strict';

const jobStatuses = ['NotStarted', 'Queued', 'Preparing', 'Starting', 'Running', 'Finalizing', 'Completed', 'Failed', 'Canceled', 'CancelRequested'];
const terminal = new Set(['Completed', 'Failed', 'Canceled', 'NotResponding']);

function jobDuration(j) {
  if (!j.start_time) return '';
  const end = j.end_time ? new Date(j.end_time) : new Date();
  return fmtDuration((end - new Date(j.start_time)) / 1000);
}

// jobCompute links a job's compute; a serverless job's hidden compute is
// shown as what the job asked for.
function jobCompute(j) {
  if (j.serverless && j.serverless.kubernetes) {
    // Pods of its own on an attached Kubernetes cluster.
    const sl = j.serverless;
    return h('a', {href: '#/computes/' + encodeURIComponent(sl.kubernetes), title: j.compute}, sl.kubernetes + ': ' + sl.instance_count + ' × ' + sl.instance_type);
  }
  if (j.serverless) {
    const sl = j.serverless;
    return h('span', {class: 'serverless', title: j.compute}, 'serverless: ' + sl.instance_count + ' × ' + sl.instance_type + (sl.tier === 'low_priority' ? ' (low priority)' : ''));
  }
  return j.compute ? h('a', {href: '#/computes/' + encodeURIComponent(j.compute)}, j.compute) : '';
}

Studio.pages.push({re: /^jobs$/, render: async () => {
  const q = new URLSearchParams(location.hash.split('?')[1] || '');
  const computes = (await api('GET', 'computes')).value;
  let limit = 50;
  const compute = h('select', {id: 'f-compute', name: 'compute', 'aria-label': 'Compute'}, h('option', {value: ''}, 'All computes'),
    computes.map(c => h('option', {value: c.name, selected: q.get('compute') === c.name}, c.name)),
    h('option', {value: 'serverless', selected: q.get('compute') === 'serverless'}, 'Serverless'));
  const status = h('select', {id: 'f-status', name: 'status', 'aria-label': 'Status'}, h('option', {value: ''}, 'Any status'),
    jobStatuses.map(s => h('option', {value: s, selected: q.get('status') === s}, s)));
  const search = h('input', {id: 'f-search', type: 'search', placeholder: 'Search name, display name, experiment', 'aria-label': 'Search', value: q.get('q') || ''});
  const body = h('div', {});
  const more = h('button', {type: 'button', id: 'more', onclick: () => { limit += 50; load(); }}, 'Show more');
  render(h('div', {class: 'title'}, h('h1', {}, 'Jobs')), h('div', {class: 'filters'}, compute, status, search), body, more);
  let js = null, stop = null;
  const draw = () => {
    if (!js) return;
    const needle = search.value.trim().toLowerCase();
    const shown = js.filter(j => !needle || [j.name, j.display_name, j.experiment_name].some(s => (s || '').toLowerCase().includes(needle)));
    more.hidden = js.length < limit;
    body.replaceChildren(table(['Name', 'Display name', 'Experiment', 'Status', 'Compute', 'Created', 'Duration'], shown.map(j => [
      h('a', {href: '#/jobs/' + encodeURIComponent(j.name)}, j.name), j.display_name || '', j.experiment_name || '', badge(j.status),
      jobCompute(j), fmtTime(j.created_on), jobDuration(j)]),
    js.length ? 'No job matches these filters.' : 'No jobs yet — submit one with tide job create -f job.yml.'));
  };
  // The list follows the server's answer for the filters; search narrows
  // it in the page.
  const load = () => {
    const p = new URLSearchParams({limit: String(limit)});
    if (compute.value) p.set('compute', compute.value);
    if (status.value) p.set('status', status.value);
    if (stop) stop();
    stop = follow('jobs?' + p, list => { js = list.value; draw(); });
  };
  for (const el of [compute, status]) el.addEventListener('change', load);
  search.addEventListener('input', draw);
  load();
}});

// The log view keeps every line in memory (for download) but only the
// last maxShown in the page, so a job with 100,000 lines stays responsive.
const maxShown = 2000;

function logView(job) {
  const lines = [];
  let tab = 'all', follow = true, paused = false;
  const pre = h('pre', {class: 'log', id: 'log', tabindex: 0, 'aria-label': 'Log', 'aria-live': 'off'});
  const tabs = h('div', {class: 'tabs', role: 'tablist', id: 'log-tabs'});
  const info = h('span', {class: 'hint', id: 'log-info'});
  const followBox = h('input', {type: 'checkbox', id: 'follow', checked: true, onchange: ev => { follow = ev.target.checked; }});
  const pauseBtn = h('button', {type: 'button', id: 'pause', onclick: () => {
    paused = !paused;
    pauseBtn.textContent = paused ? 'Resume' : 'Pause';
    if (!paused) redraw();
  }}, 'Pause');
  const download = h('button', {type: 'button', id: 'download-log', onclick: () => {
    const text = lines.filter(visible).map(display).join('\n') + '\n';
    const a = h('a', {href: URL.createObjectURL(new Blob([text], {type: 'text/plain'})), download: job + (tab === 'all' ? '' : '.node' + tab) + '.log'});
    document.body.append(a); a.click(); a.remove();
  }}, 'Download');
  const nodes = new Set();
  const counts = {all: 0};
  const drawTabs = () => tabs.replaceChildren(...['all', ...[...nodes].sort((a, b) => a - b)].map(t =>
    h('button', {type: 'button', role: 'tab', 'aria-selected': String(t === tab), class: t === tab ? 'active' : '', onclick: () => { tab = t; redraw(); drawTabs(); }},
      t === 'all' ? 'All nodes' : 'Node ' + t)));
  const visible = l => tab === 'all' || l.node === tab;
  // On the all-nodes tab of a job of several nodes, lines carry their
  // node's rank as everywhere tide prints a log (api.LogLine.Display).
  const display = l => (tab === 'all' && nodes.size > 1 ? '[node-' + l.node + '] ' : '') + l.text;
  const line = l => h('div', {class: l.stream === 'stderr' ? 'stderr' : ''}, display(l));
  const note = () => {
    const n = counts[tab] || 0;
    info.textContent = n > maxShown ? 'Showing the last ' + maxShown + ' of ' + n + ' lines; Download has them all.' : n + ' line(s)';
  };
  const redraw = () => {
    queue = [];
    pre.replaceChildren(...lines.filter(visible).slice(-maxShown).map(line));
    note();
    if (follow) pre.scrollTop = pre.scrollHeight;
  };
  // Lines arrive a thousand at a time: they are drawn in batches, with one
  // layout per batch rather than per line.
  let queue = [], scheduled = false;
  const flush = () => {
    scheduled = false;
    const batch = queue.slice(-maxShown);
    queue = [];
    const frag = document.createDocumentFragment();
    for (const l of batch) frag.append(line(l));
    pre.append(frag);
    for (let extra = pre.childElementCount - maxShown; extra > 0; extra--) pre.firstElementChild.remove();
    note();
    if (follow) pre.scrollTop = pre.scrollHeight;
  };
  const add = l => {
    lines.push(l);
    counts.all++;
    counts[l.node] = (counts[l.node] || 0) + 1;
    if (!nodes.has(l.node)) { nodes.add(l.node); drawTabs(); }
    if (paused || !visible(l)) return;
    queue.push(l);
    if (!scheduled) { scheduled = true; setTimeout(flush, 50); }
  };
  drawTabs();
  const el = h('section', {class: 'card'}, h('h2', {}, 'Log'),
    h('div', {class: 'log-bar'}, tabs, h('label', {for: 'follow'}, followBox, ' Follow'), pauseBtn, download, info), pre);
  return {el, add, done: () => { if (!paused) flush(); }};
}

Studio.pages.push({re: /^jobs\/([^/]+)$/, render: async name => {
  const path = 'jobs/' + encodeURIComponent(name);
  let j = await api('GET', path);
  const head = h('div', {class: 'title'});
  const note = h('div', {role: 'status', id: 'job-note'});
  const details = h('div', {class: 'details'});
  const events = h('section', {class: 'card'}, h('h2', {}, 'Events'), h('div', {id: 'job-events'}));
  const arts = h('section', {class: 'card'}, h('h2', {}, 'Outputs and logs'), h('div', {id: 'artifacts'}));
  const log = logView(name);
  render(head, note, details, log.el, events, arts);

  const cancel = h('button', {type: 'button', id: 'cancel', onclick: async () => {
    try { j = await api('POST', path + '/cancel'); draw(); } catch (e) { note.replaceChildren(errorBox(e)); }
  }}, 'Cancel');
  const resubmit = h('button', {type: 'button', id: 'resubmit', onclick: async () => {
    // The server drops the status fields it knows; these are the rest of
    // what a job page holds that is not the job's spec.
    const spec = Object.assign({}, j);
    for (const k of ['name', 'retried', 'queue_position', 'resolved_environment']) delete spec[k];
    try {
      const nj = await api('POST', 'jobs', spec);
      location.hash = '#/jobs/' + encodeURIComponent(nj.name);
    } catch (e) { note.replaceChildren(errorBox(e)); }
  }}, 'Re-submit');

  const draw = () => {
    // The heading and its buttons stay in place (a button replaced under
    // the pointer or the keyboard focus would lose the click).
    // A job's submitter may cancel it; anyone else needs jobs/cancel-any.
    const mayCancel = can('jobs/cancel-any') || (can('jobs/write') && Studio.me && j.created_by === Studio.me.user);
    cancel.hidden = !mayCancel || terminal.has(j.status) || j.status === 'CancelRequested';
    resubmit.hidden = !can('jobs/write');
    if (!head.firstChild) head.append(h('h1', {}, j.display_name || j.name, ' ', h('span', {id: 'job-status'})), h('div', {class: 'actions'}, cancel, resubmit));
    const st = head.querySelector('#job-status');
    if (st.textContent !== j.status) st.replaceChildren(badge(j.status));
    details.replaceChildren(kv([
      ['Name', j.name], ['Experiment', j.experiment_name], ['Compute', jobCompute(j)],
      ['Waiting because', j.pending_reason ? h('span', {id: 'pending-reason'}, j.pending_reason) : ''],
      ['Queue position', j.queue_position || ''],
      ['Command', h('code', {}, j.command)], ['Created', fmtTime(j.created_on)], ['Started', fmtTime(j.start_time)],
      ['Ended', fmtTime(j.end_time)], ['Duration', jobDuration(j)], ['Attempt', j.attempt > 1 ? j.attempt : ''],
      ['Exit code', j.exit_code === undefined ? '' : j.exit_code], ['Error', j.error],
      ['Nodes', (j.ranks || []).map((r, i) => h('div', {}, 'rank ' + i + ': ' + r.node + (r.status ? ' (' + r.status + ')' : '')))],
      ['Cost', j.cost ? money(j.cost.amount, j.cost.currency) : ''],
      ['Metrics', Object.entries(j.metrics || {}).map(([k, v]) => k + '=' + v).join(' ')],
      ['Params', Object.entries(j.params || {}).map(([k, v]) => k + '=' + v).join(' ')],
      ['Tags', Object.entries(j.tags || {}).map(([k, v]) => k + '=' + v).join(' ')],
    ]));
  };
  draw();

  const drawSide = async () => {
    const as = await api('GET', path + '/artifacts');
    const base = '/v1/workspaces/' + encodeURIComponent(Studio.ws) + '/' + path + '/artifacts/';
    arts.querySelector('#artifacts').replaceChildren(table(['File', 'Size'], as.value.map(a => [
      h('a', {href: base + a.path.split('/').map(encodeURIComponent).join('/'), download: a.path.split('/').pop()}, a.path), a.size + ' B']),
    terminal.has(j.status) ? 'The job kept no files.' : 'Files in outputs/ and logs/ appear here when the job ends.'));
  };
  // The job and its events follow the server's answers; the files are
  // listed again whenever the job changes (they appear when it ends).
  follow(path, nj => { j = nj; draw(); return drawSide(); });
  follow(path + '/events', evs => events.querySelector('#job-events').replaceChildren(
    table(['Time', 'Kind', 'Message'], evs.value.map(e => [fmtTime(e.time), e.kind, e.message]), 'No events yet.')));

  // The log streams over server-sent events from the same endpoint as
  // 'tide job stream'; EventSource resumes from the last line it saw.
  const es = new EventSource('/v1/workspaces/' + encodeURIComponent(Studio.ws) + '/' + path + '/logs');
  es.addEventListener('log', ev => log.add(JSON.parse(ev.data)));
  es.addEventListener('status', ev => { j = JSON.parse(ev.data); draw(); });
  es.addEventListener('end', ev => { j = JSON.parse(ev.data); draw(); log.done(); es.close(); drawSide(); });
  onLeave(() => es.close());
}});
