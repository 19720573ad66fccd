// Cost and budgets, and quota usage.
'use strict';

Studio.pages.push({re: /^cost$/, render: async () => {
  const since = h('select', {id: 'since', 'aria-label': 'Since'}, [['24h', 'Last 24 hours'], ['7d', 'Last 7 days'], ['30d', 'Last 30 days']].map(([v, l]) => h('option', {value: v}, l)));
  const by = h('select', {id: 'by', 'aria-label': 'Group by'}, ['compute', 'node', 'job', 'user', 'tag'].map(v => h('option', {value: v}, 'by ' + v)));
  const report = h('div', {id: 'cost-report'});
  const budgets = h('div', {id: 'budgets'});
  render(h('h1', {}, 'Cost'), h('div', {class: 'filters'}, since, by), report, h('h2', {}, 'Budgets'), budgets);
  const load = async () => {
    const [r, bs] = await Promise.all([api('GET', 'cost?by=' + by.value + '&since=' + since.value), api('GET', 'budgets')]);
    report.replaceChildren(table([r.by, 'Node-hours', 'Amount'], r.rows.map(x => [x.key, x.node_hours.toFixed(2), money(x.amount, r.currency)]), 'Nothing ran in this period.'),
      h('p', {class: 'total'}, 'Total: ' + money(r.total, r.currency) + ' for ' + r.node_hours.toFixed(2) + ' node-hours'));
    budgets.replaceChildren(table(['Name', 'Amount', 'Period', 'Spent', 'Used', 'Alerts'], bs.value.map(b => [
      b.name, money(b.amount), b.period, money(b.spent),
      h('meter', {min: 0, max: 1, value: Math.min(1, b.amount ? b.spent / b.amount : 0), title: Math.round(100 * (b.amount ? b.spent / b.amount : 0)) + ' %'}),
      (b.alerts || []).map(a => h('div', {}, a.threshold + ' % at ' + fmtTime(a.time)))]),
    'No budgets — add one with tide budget create.'));
  };
  for (const el of [since, by]) el.addEventListener('change', load);
  every(10000, load);
}});

Studio.pages.push({re: /^usage$/, render: async () => {
  const body = h('div', {});
  render(h('h1', {}, 'Usage and quota'), body);
  follow('/v1/usages', list => {
    const us = list.value;
    body.replaceChildren(table(['Location', 'VM family', 'Tier', 'In use', 'Limit', 'Unit'], us.map(u => [u.location, u.family, u.tier,
      h('span', {}, u.current_value, ' ', h('meter', {min: 0, max: u.limit || 1, value: u.current_value})), u.limit, u.unit]),
    'No quota in use.'));
  });
}});
