// Computes: the list, a compute's page (details, nodes, events,
// monitoring) and the create form.
'use strict';

const nodeStates = ['idle', 'running', 'preparing', 'unusable', 'leaving', 'preempted'];

function isInstance(c) { return c.type === 'computeinstance'; }
function isAttached(c) { return c.type === 'virtualmachine'; }
// machineSize is an attached machine's size: its own CPUs and memory.
function machineSize(c) { return c.vcpus + ' vCPUs, ' + c.memory_gb + ' GB' + (c.gpus && c.gpus.length ? ', ' + c.gpus.length + ' GPUs' : ''); }

function computeState(c) {
  if (c.provisioning_state && c.provisioning_state !== 'Succeeded') return c.provisioning_state;
  if (isInstance(c)) return c.state || c.allocation_state || '';
  return c.allocation_state || '';
}

Studio.pages.push({re: /^computes$/, render: async () => {
  const body = h('div', {});
  const canCreate = can('computes/write') ? h('a', {href: '#/create', class: 'button', id: 'create-compute'}, 'Create compute') : '';
  render(h('div', {class: 'title'}, h('h1', {}, 'Computes'), canCreate), body);
  follow('computes', async list => {
    const cs = list.value;
    if (!cs.length) {
      body.replaceChildren(can('computes/write') ? h('p', {class: 'empty'}, 'No computes yet — ', h('a', {href: '#/create'}, 'create one'), ', or run tide compute create -f FILE.')
        : h('p', {class: 'empty'}, 'No computes yet; your role here does not create them.'));
      return;
    }
    body.replaceChildren(table(
      ['Name', 'Type', 'Size', 'Tier', 'State', 'Nodes (current/target)', ...nodeStates.map(s => s[0].toUpperCase() + s.slice(1)), 'Min/Max', 'Idle before scale-down', 'Cost/hour'],
      cs.map(c => {
        const n = c.node_state_counts || {};
        const price = c.cost ? c.cost.price_per_hour * Math.max(c.current_node_count, 0) : undefined;
        return [h('a', {href: '#/computes/' + encodeURIComponent(c.name)}, c.name), c.type, isAttached(c) ? machineSize(c) : c.type === 'kubernetes' ? Object.keys((c.properties || {}).instanceTypes || {}).sort().join(', ') : c.size, c.tier, badge(computeState(c)),
          h('span', {class: 'nodes'}, c.current_node_count + ' / ' + c.target_node_count),
          ...nodeStates.map(s => n[s] || 0), c.min_instances + ' / ' + c.max_instances,
          fmtDuration(c.idle_time_before_scale_down), c.cost ? money(price, c.cost.currency) : ''];
      }), ''));
  });
}});

Studio.pages.push({re: /^computes\/([^/]+)(?:\/(details|nodes|events|monitoring))?$/, render: async (name, tab) => {
  tab = tab || 'details';
  const head = h('div', {class: 'title'});
  const tabs = h('nav', {class: 'tabs', 'aria-label': 'Compute tabs'}, ['details', 'nodes', 'events', 'monitoring'].map(t =>
    h('a', {href: '#/computes/' + encodeURIComponent(name) + '/' + t, class: t === tab ? 'active' : '', 'aria-current': t === tab ? 'page' : false}, t[0].toUpperCase() + t.slice(1))));
  const body = h('div', {id: 'tab-' + tab});
  const note = h('div', {role: 'status'});
  render(head, note, tabs, body);
  let current = null, drawn = false;
  const gone = e => {
    if (e.status === 404) note.replaceChildren(h('p', {class: 'error', role: 'alert'}, 'Compute ' + name + ' does not exist (it was deleted). ', h('a', {href: '#/computes'}, 'Back to computes')));
    else note.replaceChildren(errorBox(e));
  };
  const path = 'computes/' + encodeURIComponent(name);
  const refresh = async c => {
    note.replaceChildren();
    current = c;
    // The buttons are drawn once (redrawn only when the state changes), so
    // a click never lands on a button being replaced.
    const state = computeState(c);
    if (head.dataset.state !== state) {
      head.dataset.state = state;
      head.replaceChildren(h('h1', {}, c.name, ' ', badge(state)), computeActions(c, note));
    }
    if (tab === 'details' && !drawn) { body.replaceChildren(computeDetails(c, note)); drawn = true; }
    if (tab === 'details' && drawn) updateDetails(body, c);
  };
  follow(path, refresh, gone);
  // The nodes and events tabs follow their own lists.
  if (tab === 'nodes') follow(path + '/nodes', ns => current && drawNodes(body, current, ns.value));
  if (tab === 'events') follow(path + '/events', evs => drawEvents(body, evs.value));
  if (tab === 'monitoring') await drawMonitoring(body, name);
}});

function computeActions(c, note) {
  const act = (label, fn) => h('button', {type: 'button', onclick: async () => {
    try { await fn(); } catch (e) { note.replaceChildren(errorBox(e)); }
  }}, label);
  const path = 'computes/' + encodeURIComponent(c.name);
  const out = h('div', {class: 'actions'});
  // An instance assigned to a user (create_on_behalf_of) is theirs, its
  // workspace's Owners' and server admins'.
  if (mayOperate(c)) {
    out.append(act('Start', () => api('POST', path + '/start')), act('Stop', () => api('POST', path + '/stop')), act('Restart', () => api('POST', path + '/restart')));
  }
  if (can('computes/write')) out.append(act('Delete', async () => {
    if (!confirm('Delete compute ' + c.name + '? Its nodes are released.')) return;
    await api('DELETE', path);
    location.hash = '#/computes';
  }));
  return out;
}

// mayOperate: the user may start, stop, open and SSH into instance c. One
// assigned to a user (create_on_behalf_of) is theirs, its workspace's
// Owners' and server admins'.
function mayOperate(c) {
  const assigned = c.create_on_behalf_of && c.create_on_behalf_of.user_object_id;
  const mine = !assigned || (Studio.me && Studio.me.user === assigned) || can('roles/write');
  return isInstance(c) && can('computes/operate') && mine;
}

// applications are an instance's links (Jupyter, through the server's
// proxy, in a new tab) or why each is not available.
function applications(c) {
  return (c.applications || []).map(a => {
    if (!a.available || !a.endpoint_uri) return h('span', {class: 'hint'}, a.display_name + ': ' + (a.reason || 'not available'));
    if (!mayOperate(c)) return h('span', {class: 'hint'}, a.display_name + ': you may not open it (needs computes/operate on this instance)');
    // The path only: the link opens on the origin Studio was signed in on.
    const href = new URL(a.endpoint_uri, location.href).pathname;
    return h('a', {id: 'app-' + a.display_name.toLowerCase(), href, target: '_blank', rel: 'noopener'}, a.display_name);
  }).flatMap((el, i) => i ? [' ', el] : [el]);
}

function detailPairs(c) {
  if (isInstance(c)) {
    return [['Type', c.type], ['Size', c.size], ['Location', c.location], ['State', c.state],
      ['Applications', (c.applications || []).length ? h('span', {}, applications(c)) : ''],
      ['SSH', c.connection && c.connection.ssh],
      ['Last operation', c.last_operation ? c.last_operation.operation_name + ' ' + c.last_operation.operation_status + ' (' + c.last_operation.operation_trigger + ', ' + fmtTime(c.last_operation.operation_time) + ')' : ''],
      ['Idle shutdown', c.idle_time_before_shutdown_minutes ? c.idle_time_before_shutdown_minutes + ' minutes' : (c.idle_time_before_shutdown || 'never')],
      ['Price per hour', c.cost ? money(c.cost.price_per_hour, c.cost.currency) : ''],
      ['Created', fmtTime(c.created_on)],
      ['Errors', (c.errors || []).map(e => e.code + ': ' + e.message).join('; ')]];
  }

  if (isAttached(c)) {
    const port = (c.ssh_settings && c.ssh_settings.ssh_port) || 22;
    return [['Type', c.type], ['Machine', (c.ssh_settings ? c.ssh_settings.admin_username + '@' : '') + c.address + ' port ' + port],
      ['Size', machineSize(c)], ['Host key', c.host_key_fingerprint + ' (' + (c.host_key_source || '').replaceAll('_', ' ') + ')'],
      ['Provisioning', c.provisioning_state], ['Nodes', c.current_node_count + ' current'],
      ['Credentials', c.credentials_secret ? 'workspace secret ' + c.credentials_secret : ''],
      ['Description', c.description], ['Created', fmtTime(c.created_on)],
      ['Errors', (c.errors || []).map(e => e.code + ': ' + e.message).join('; ')]];
  }
  if (c.type === 'kubernetes') {
    // An attached cluster: each job gets Pods of one of its instance types.
    const types = (c.properties || {}).instanceTypes || {};
    const res = m => Object.entries(m || {}).map(([k, v]) => k + ' ' + v).join(', ');
    return [['Type', c.type], ['API server', c.server], ['Namespace', c.namespace],
      ['Default instance type', (c.properties || {}).defaultInstanceType],
      ...Object.keys(types).sort().map(n => ['Instance type ' + n, ['requests ' + res(types[n].resources.requests), 'limits ' + res(types[n].resources.limits),
        types[n].nodeSelector ? 'node selector ' + res(types[n].nodeSelector) : '', (types[n].tolerations || []).length ? types[n].tolerations.length + ' toleration(s)' : ''].filter(Boolean).join('; ')]),
      ['Provisioning', c.provisioning_state],
      ['Credentials', c.kubeconfig_secret ? 'workspace secret ' + c.kubeconfig_secret : ''],
      ['Description', c.description], ['Created', fmtTime(c.created_on)],
      ['Errors', (c.errors || []).map(e => e.code + ': ' + e.message).join('; ')]];
  }
  return [['Type', c.type], ['Size', c.size], ['Location', c.location], ['Tier', c.tier],
    ['Provisioning', c.provisioning_state], ['Allocation', c.allocation_state],
    ['Nodes', c.current_node_count + ' current, ' + c.target_node_count + ' target'],
    ['Price per node-hour', c.cost ? money(c.cost.price_per_hour, c.cost.currency) : ''],
    ['Cost so far', c.cost ? money(c.cost.amount, c.cost.currency) + ' (' + c.cost.node_hours.toFixed(2) + ' node-hours)' : ''],
    ['Runtime', c.runtime], ['Description', c.description], ['Created', fmtTime(c.created_on)],
    ['Errors', (c.errors || []).map(e => e.code + ': ' + e.message).join('; ')]];
}

// yamlEditor edits compute c as its YAML file (the server's, without the
// fields it sets) and saves it with PUT, If-Match its version: a change
// made meanwhile elsewhere is not overwritten. Errors show with their line.
function yamlEditor(c) {
  const path = 'computes/' + encodeURIComponent(c.name);
  const text = h('textarea', {id: 'edit-yaml', name: 'yaml', rows: 14, spellcheck: 'false', 'aria-label': 'Compute YAML'});
  let etag = '';
  const load = async () => {
    const got = await api('GET', path, undefined, {accept: 'application/yaml'});
    text.value = got.text;
    etag = got.etag;
  };
  const form = h('form', {class: 'card', id: 'edit-yaml-form', onsubmit: async ev => {
    ev.preventDefault();
    const out = form.querySelector('.form-errors');
    try {
      await api('POST', '/v1/parse/compute?file=' + encodeURIComponent(c.name + '.yml'), text.value, {type: 'application/yaml'});
      await api('PUT', path, text.value, {type: 'application/yaml', headers: etag ? {'If-Match': etag} : {}});
      showFieldErrors(form, null);
      await load();
      out.replaceChildren(h('li', {class: 'ok'}, 'Saved.'));
    } catch (e) {
      if (e.status === 412) {
        out.replaceChildren(h('li', {}, 'The compute changed since you opened it: ', h('button', {type: 'button', onclick: () => load().then(() => out.replaceChildren())}, 'Load its current YAML'), ' and edit again.'));
        return;
      }
      showFieldErrors(form, e, true);
    }
  }}, h('h2', {}, 'Edit as YAML'),
  h('p', {class: 'hint'}, 'The file tide compute create -f takes: schedules, identity, SSH settings and every other field. What may change on an existing compute is what the CLI may change.'),
  text, h('ul', {class: 'form-errors', 'aria-live': 'polite'}), h('button', {type: 'submit'}, 'Save YAML'));
  load().catch(e => form.querySelector('.form-errors').replaceChildren(h('li', {}, e.message)));
  return form;
}

function computeDetails(c, note) {
  const info = h('div', {class: 'details'}, kv(detailPairs(c)));
  const edit = can('computes/write') ? yamlEditor(c) : '';
  if (isInstance(c)) return h('div', {}, info, edit);
  // An attached machine or cluster cannot be changed (detach and attach it
  // again) and has no scale of its own.
  if (c.type === 'kubernetes' || isAttached(c)) return h('div', {}, info);
  const num = (name, label, v) => [h('label', {for: 'f-' + name}, label), h('input', {type: 'number', min: 0, id: 'f-' + name, name, value: v, required: true})];
  const form = h('form', {class: 'card', id: 'scale-form', onsubmit: async ev => {
    ev.preventDefault();
    const f = new FormData(form);
    try {
      await api('PATCH', 'computes/' + encodeURIComponent(c.name), {
        min_instances: Number(f.get('min_instances')), max_instances: Number(f.get('max_instances')),
        idle_time_before_scale_down: Number(f.get('idle_time_before_scale_down'))});
      showFieldErrors(form, null);
      form.querySelector('.form-errors').replaceChildren(h('li', {class: 'ok'}, 'Saved.'));
    } catch (e) { showFieldErrors(form, e); }
  }}, h('h2', {}, 'Scale settings'),
  num('min_instances', 'Min nodes', c.min_instances), num('max_instances', 'Max nodes', c.max_instances),
  num('idle_time_before_scale_down', 'Idle seconds before scale-down', c.idle_time_before_scale_down),
  h('ul', {class: 'form-errors', 'aria-live': 'polite'}), h('button', {type: 'submit'}, 'Save'));
  return h('div', {}, info, can('computes/write') ? form : '', edit);
}

// updateDetails redraws the details only when they changed, so a link
// or text being selected is not replaced under the pointer every refresh.
function updateDetails(body, c) {
  const dl = body.querySelector('dl.kv');
  const next = kv(detailPairs(c));
  if (dl && !dl.isEqualNode(next)) dl.replaceWith(next);
}

// connection is what a user pastes to reach a node: ssh when the compute
// has an admin user, else the node's address.
function connection(c, n) {
  if (!n.address) return '';
  const user = c.ssh_settings && c.ssh_settings.admin_username;
  const [host, port] = n.address.split(':');
  return user ? 'ssh ' + (port ? '-p ' + port + ' ' : '') + user + '@' + host : n.address;
}

function copyButton(text) {
  return h('button', {type: 'button', class: 'small', 'aria-label': 'Copy ' + text, onclick: ev => {
    navigator.clipboard && navigator.clipboard.writeText(text);
    ev.target.textContent = 'Copied';
  }}, 'Copy');
}

function drawNodes(body, c, ns) {
  body.replaceChildren(table(['Node', 'State', 'Job', 'Address', 'Runtime', 'In state for', 'Connection'], ns.map(n => {
    const conn = connection(c, n);
    // A node's job is its assignment: WORKSPACE/JOB/ATTEMPT.
    const [, job, attempt] = (n.job || '').split('/');
    return [n.id, badge(n.state), job ? h('span', {}, h('a', {href: '#/jobs/' + encodeURIComponent(job)}, job), attempt > 1 ? ' (attempt ' + attempt + ')' : '') : '',
      n.address || '', n.runtime || '', n.state_since ? fmtDuration((Date.now() - new Date(n.state_since)) / 1000) : '',
      conn ? h('span', {class: 'conn'}, h('code', {}, conn), ' ', copyButton(conn)) : ''];
  }), 'No nodes now: the compute is at ' + c.min_instances + ' (its minimum). Submit a job to it and a node starts.'));
}

function drawEvents(body, evs) {
  body.replaceChildren(table(['Time', 'Kind', 'Message'], evs.slice().reverse().map(e => [fmtTime(e.time), e.kind, e.message]), 'No events yet.'));
}

// drawMonitoring charts nodes by state and queued jobs over time from the
// server's history, with the scale-up and scale-down events as markers.
async function drawMonitoring(body, name) {
  const range = h('select', {id: 'range', 'aria-label': 'Time range'}, [['1h', 'Last hour'], ['6h', '6 hours'], ['24h', '24 hours'], ['7d', 'A week']].map(([v, l]) => h('option', {value: v}, l)));
  const chart = h('div', {class: 'chart', id: 'chart'});
  const summary = h('p', {class: 'hint', id: 'chart-summary'});
  body.replaceChildren(h('label', {for: 'range'}, 'Range '), range, chart, summary);
  let plot = null;
  const draw = async () => {
    try { await drawChart(); } catch (e) { summary.replaceChildren(errorBox(e)); }
  };
  const drawChart = async () => {
    const path = 'computes/' + encodeURIComponent(name);
    const [hist, evs] = await Promise.all([api('GET', path + '/history?since=' + range.value + '&points=240'), api('GET', path + '/events').then(l => l.value)]);
    const xs = hist.map(s => new Date(s.time).getTime() / 1000);
    const series = nodeStates.map(st => hist.map(s => s.nodes[st] || 0));
    const queued = hist.map(s => s.queued || 0);
    const from = xs.length ? xs[0] : 0;
    const marks = evs.filter(e => (e.kind === 'ScaleUp' || e.kind === 'ScaleDown') && new Date(e.time).getTime() / 1000 >= from)
      .map(e => ({x: new Date(e.time).getTime() / 1000, up: e.kind === 'ScaleUp'}));
    const peak = Math.max(0, ...hist.map(s => nodeStates.reduce((a, st) => a + (s.nodes[st] || 0), 0)));
    summary.textContent = hist.length ? hist.length + ' samples; at most ' + peak + ' node(s); ' + marks.filter(m => m.up).length + ' scale-up and ' + marks.filter(m => !m.up).length + ' scale-down event(s).' : 'No samples yet: the server records the compute once a minute.';
    chart.dataset.peak = peak;
    chart.dataset.last = hist.length ? nodeStates.reduce((a, st) => a + (hist[hist.length - 1].nodes[st] || 0), 0) : '';
    if (plot) plot.destroy();
    if (!hist.length) return;
    const colors = ['#7a8b99', '#1f77b4', '#e6a700', '#d62728', '#9467bd', '#8c564b'];
    const opts = {
      width: Math.max(240, chart.clientWidth - 16), height: 280,
      series: [{}, ...nodeStates.map((st, i) => ({label: st, stroke: colors[i], width: 2})),
        {label: 'queued jobs', stroke: '#2ca02c', dash: [6, 4], width: 2}],
      axes: [{}, {label: 'count'}],
      scales: {y: {range: (u, lo, hi) => [0, Math.max(1, hi + 1)]}},
      plugins: [{hooks: {draw: u => {
        const ctx = u.ctx;
        ctx.save();
        for (const m of marks) {
          const x = u.valToPos(m.x, 'x', true);
          ctx.strokeStyle = m.up ? 'rgba(31,119,180,0.5)' : 'rgba(214,39,40,0.5)';
          ctx.setLineDash([2, 3]);
          ctx.beginPath(); ctx.moveTo(x, u.bbox.top); ctx.lineTo(x, u.bbox.top + u.bbox.height); ctx.stroke();
        }
        ctx.restore();
      }}}],
    };
    plot = new uPlot(opts, [xs, ...series, queued], chart);
  };
  range.addEventListener('change', draw);
  every(5000, draw);
  // The chart follows its box's width (a phone turned, a window resized).
  const fit = new ResizeObserver(() => plot && plot.setSize({width: Math.max(240, chart.clientWidth - 16), height: 280}));
  fit.observe(chart);
  onLeave(() => { fit.disconnect(); if (plot) plot.destroy(); });
}

// The create form: Azure's fields for a cluster or an instance (its SSH
// key, idle shutdown and a daily stop schedule), or a pasted YAML file
// read by the same parser as the CLI's (so errors name the line and the
// field, and any field Azure has can be given).
Studio.pages.push({re: /^create$/, render: async () => {
  const [sizes, locs] = await Promise.all([api('GET', '/v1/sizes'), api('GET', '/v1/locations')]);
  const field = (label, input, hint) => h('div', {class: 'field'}, h('label', {for: input.id}, label), input, hint ? h('span', {class: 'hint'}, hint) : '');
  const type = h('select', {id: 'c-type', name: 'type'}, h('option', {value: 'amlcompute'}, 'Compute cluster (amlcompute)'), h('option', {value: 'computeinstance'}, 'Compute instance (computeinstance)'));
  const cluster = h('div', {id: 'cluster-fields'},
    field('Tier', h('select', {id: 'c-tier', name: 'tier'}, h('option', {value: 'dedicated'}, 'dedicated'), h('option', {value: 'low_priority'}, 'low_priority'))),
    field('Min nodes', h('input', {id: 'c-min', name: 'min_instances', type: 'number', value: 0})),
    field('Max nodes', h('input', {id: 'c-max', name: 'max_instances', type: 'number', value: 2})),
    field('Idle seconds before scale-down', h('input', {id: 'c-idle', name: 'idle_time_before_scale_down', type: 'number', value: 120})),
    field('SSH user', h('input', {id: 'c-ssh-user', name: 'admin_username', autocomplete: 'off', placeholder: 'azureuser'}), 'who ssh logs in as (ssh_settings.admin_username)'));
  const instance = h('div', {id: 'instance-fields', hidden: true},
    field('Idle minutes before shutdown', h('input', {id: 'c-idle-shutdown', name: 'idle_time_before_shutdown_minutes', type: 'number', placeholder: 'never'})),
    field('Stop every day at (cron)', h('input', {id: 'c-stop-cron', name: 'schedules', autocomplete: 'off', placeholder: '0 18 * * *'}), 'schedules.compute_start_stop: a stop trigger'),
    field('Time zone', h('input', {id: 'c-tz', name: 'time_zone', autocomplete: 'off', value: Intl.DateTimeFormat().resolvedOptions().timeZone || 'UTC'}), 'IANA or Windows name'));
  type.addEventListener('change', () => { const inst = type.value === 'computeinstance'; cluster.hidden = inst; instance.hidden = !inst; });
  const form = h('form', {class: 'card', id: 'create-form', novalidate: true, onsubmit: async ev => {
    ev.preventDefault();
    const f = new FormData(form);
    const c = {name: f.get('name'), type: f.get('type'), size: f.get('size')};
    if (c.type === 'amlcompute') {
      Object.assign(c, {tier: f.get('tier'), min_instances: Number(f.get('min_instances')), max_instances: Number(f.get('max_instances')),
        idle_time_before_scale_down: Number(f.get('idle_time_before_scale_down'))});
    } else {
      if (f.get('idle_time_before_shutdown_minutes')) c.idle_time_before_shutdown_minutes = Number(f.get('idle_time_before_shutdown_minutes'));
      if (f.get('schedules')) c.schedules = {compute_start_stop: [{action: 'stop', trigger: {type: 'cron', expression: f.get('schedules'), time_zone: f.get('time_zone') || 'UTC'}}]};
    }
    if (f.get('ssh_settings')) {
      c.ssh_settings = {ssh_key_value: f.get('ssh_settings')};
      if (c.type === 'amlcompute') c.ssh_settings.admin_username = f.get('admin_username') || 'azureuser';
    }
    if (f.get('location')) c.location = f.get('location');
    if (f.get('description')) c.description = f.get('description');
    if (!c.name) { showFieldErrors(form, {problem: {field: 'name'}, message: 'name: give the compute a name'}); return; }
    try {
      await api('PUT', 'computes/' + encodeURIComponent(c.name), c);
      location.hash = '#/computes/' + encodeURIComponent(c.name);
    } catch (e) { showFieldErrors(form, e); }
  }},
  h('h2', {}, 'From fields'),
  field('Type', type),
  field('Name', h('input', {id: 'c-name', name: 'name', required: true, autocomplete: 'off'})),
  field('Size', h('select', {id: 'c-size', name: 'size'}, sizes.value.map(s => h('option', {value: s.name, selected: s.name === 'Standard_DS3_v2'},
    s.name + ' (' + s.vcpus + ' vCPU, ' + s.memory_gb + ' GB' + (s.gpus ? ', ' + s.gpus + ' GPU' : '') + ', ' + money(s.price_per_hour) + '/h)')))),
  field('Location', h('select', {id: 'c-location', name: 'location'}, h('option', {value: ''}, 'default'), locs.value.map(l => h('option', {value: l.name}, l.name + ' (' + l.provider + ')')))),
  cluster, instance,
  field('SSH public key', h('textarea', {id: 'c-ssh-key', name: 'ssh_settings', rows: 2, spellcheck: 'false', placeholder: 'ssh-ed25519 AAAA... you@laptop'}), 'lets tide compute connect-ssh in (ssh_settings.ssh_key_value)'),
  field('Description', h('input', {id: 'c-desc', name: 'description'})),
  h('ul', {class: 'form-errors', 'aria-live': 'polite'}),
  h('button', {type: 'submit'}, 'Create'));
  const yaml = h('textarea', {id: 'c-yaml', name: 'yaml', rows: 10, spellcheck: 'false',
    placeholder: '$schema: https://azuremlschemas.azureedge.net/latest/amlCompute.schema.json\nname: cpu-cluster\ntype: amlcompute\nsize: Standard_DS3_v2\nmin_instances: 0\nmax_instances: 2'});
  const yform = h('form', {class: 'card', id: 'yaml-form', onsubmit: async ev => {
    ev.preventDefault();
    try {
      const c = await api('POST', '/v1/parse/compute?file=compute.yml', yaml.value, {type: 'application/yaml'});
      await api('PUT', 'computes/' + encodeURIComponent(c.name), yaml.value, {type: 'application/yaml'});
      location.hash = '#/computes/' + encodeURIComponent(c.name);
    } catch (e) { showFieldErrors(yform, e, true); }
  }}, h('h2', {}, 'From YAML'), h('label', {for: 'c-yaml'}, 'Azure ML compute YAML'), yaml,
  h('ul', {class: 'form-errors', 'aria-live': 'polite'}), h('button', {type: 'submit'}, 'Create from YAML'));
  render(h('h1', {}, 'Create compute'), h('div', {class: 'grid2'}, form, yform));
}});
