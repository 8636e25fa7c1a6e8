/* fitwhisper report renderer: reads the JSON in #report-data and builds the page.
   Plain DOM, no network; charts by uPlot (inlined beside this file). The clip table is
   paged: only PAGE rows exist in the document at a time, so 5,000 clips open at once. */
(function () {
  "use strict";
  var PAGE = 50;
  var D = JSON.parse(document.getElementById("report-data").textContent);
  var app = document.getElementById("app");
  var charts = [];

  function el(tag, attrs, children) {
    var e = document.createElement(tag);
    for (var k in attrs || {}) {
      if (k === "text") e.textContent = attrs[k];
      else if (k === "cls") e.className = attrs[k];
      else e.setAttribute(k, attrs[k]);
    }
    (children || []).forEach(function (c) {
      if (c == null) return;
      e.appendChild(typeof c === "string" ? document.createTextNode(c) : c);
    });
    return e;
  }
  function pct(x) { return x == null ? "–" : (100 * x).toFixed(2) + "%"; }
  function pts(x) { return x == null ? "–" : (x > 0 ? "+" : "") + (100 * x).toFixed(2) + " pt"; }
  function num(x, d) { return x == null ? "–" : (+x).toFixed(d == null ? 2 : d); }
  function show(v) {
    if (v == null) return "–";
    if (typeof v === "object") return JSON.stringify(v);
    return String(v);
  }
  function section(title, id, children) {
    return el("section", { id: id }, [el("h2", { text: title })].concat(children));
  }
  function table(head, rows, cls) {
    return el("table", { cls: cls || "" }, [
      el("thead", {}, [el("tr", {}, head.map(function (h) { return el("th", { text: h }); }))]),
      el("tbody", {}, rows.map(function (r) {
        return el("tr", {}, r.map(function (c) {
          return c instanceof Node ? el("td", {}, [c]) : el("td", { text: show(c) });
        }));
      })),
    ]);
  }
  function keyValues(obj) {
    return table(["option", "value"], Object.keys(obj || {}).map(function (k) { return [k, obj[k]]; }), "kv");
  }
  function interval(c) {
    if (!c) return "–";
    var ci = c.low == null ? "" : " (95% interval " + pts(c.low) + " to " + pts(c.high) + ")";
    return pts(c.difference) + ci;
  }

  /* --- charts ---------------------------------------------------------------------- */
  var COLOURS = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b"];
  var DASHES = [[], [6, 3], [2, 2], [8, 2, 2, 2]];
  // Ticks in 3 significant figures, small values (learning rates) in exponent form.
  function tickLabels(u, vals) {
    return vals.map(function (v) {
      if (v == null) return "";
      var a = Math.abs(v);
      return a !== 0 && (a < 1e-2 || a >= 1e5) ? v.toExponential(1) : String(+v.toPrecision(3));
    });
  }
  function chart(title, xs, series, yLabel) {
    var box = el("figure", { cls: "chart" });
    var usable = series.filter(function (s) { return s.values.some(function (v) { return v != null; }); });
    if (!xs.length || !usable.length) return null;
    box.setAttribute("data-points", String(xs.length));
    var opts = {
      title: title, width: 520, height: 220,
      scales: { x: { time: false } },
      axes: [{ label: "step" }, { label: yLabel || "", size: 64, values: tickLabels }],
      series: [{ label: "step" }].concat(usable.map(function (s, i) {
        return { label: s.label, stroke: COLOURS[i % COLOURS.length], dash: s.dash || DASHES[i % DASHES.length],
                 width: 1.5, spanGaps: true, points: { show: xs.length < 60 } };
      })),
    };
    charts.push(function () {
      new uPlot(opts, [xs].concat(usable.map(function (s) { return s.values; })), box);
    });
    return box;
  }
  function curveCharts(c, plan) {
    if (!c || !c.step || !c.step.length) return [];
    var out = [];
    out.push(chart("training loss", c.step, [{ label: "loss", values: c.loss || [] }]));
    out.push(chart("learning rate", c.step, [{ label: "learning rate", values: c.learning_rate || [] }]));
    var ev = c.eval || {};
    var evSeries = Object.keys(ev).filter(function (k) { return k !== "eval_loss" && !/_raw$/.test(k); })
      .map(function (k) { return { label: k.replace(/^eval_/, ""), values: ev[k] }; });
    if (c.eval_step.length) {
      out.push(chart("evaluation error rate", c.eval_step, evSeries));
      if (ev.eval_loss) out.push(chart("evaluation loss", c.eval_step, [{ label: "eval loss", values: ev.eval_loss }]));
    }
    var mem = Object.keys(c.memory || {}).map(function (k) {
      return { label: k.replace(/^mem_/, "").replace(/_mib$/, "") + " (MiB)", values: c.memory[k] };
    });
    if (plan && plan.predicted_gib != null) {
      var p = plan.predicted_gib * 1024;
      mem.push({ label: "planned peak (MiB)", values: c.step.map(function () { return p; }), dash: [10, 5] });
    }
    out.push(chart("memory per logging step", c.step, mem, "MiB"));
    if (c.clips_per_second) out.push(chart("clips per second", c.step, [{ label: "clips/s", values: c.clips_per_second }]));
    if (c.data_wait_share) out.push(chart("share of time waiting for data", c.step, [{ label: "data wait", values: c.data_wait_share }]));
    return out.filter(Boolean);
  }

  /* --- alignment ------------------------------------------------------------------- */
  // Marked without colour too: substitutions [struck→underlined], deletions struck,
  // insertions underlined; the colours only repeat it.
  function alignment(ops, sep) {
    var span = el("span", { cls: "align" });
    ops.forEach(function (op, i) {
      if (i) span.appendChild(document.createTextNode(sep));
      var kind = op[0], r = op[1], h = op[2];
      if (kind === "=") span.appendChild(document.createTextNode(r));
      else if (kind === "S") span.appendChild(el("span", { cls: "op-s", title: "substitution" },
        ["[", el("del", { text: r }), "→", el("ins", { text: h }), "]"]));
      else if (kind === "D") span.appendChild(el("del", { cls: "op-d", title: "deletion", text: r }));
      else span.appendChild(el("ins", { cls: "op-i", title: "insertion", text: h }));
    });
    return span;
  }
  // A clip named by its path shows the file name; the whole id is its tooltip (and is
  // what the filter searches).
  function clipName(id) {
    var name = String(id).split(/[\\/]/).pop();
    return el("span", { cls: "clip-id", title: String(id), text: name });
  }
  function audioCell(src) {
    if (!src) return el("span", { cls: "muted", text: "no file" });
    return el("audio", { controls: "", preload: "metadata", src: src });
  }

  /* --- the paged, sortable, filterable clip table ---------------------------------- */
  function clipTable(spec) {
    // spec: rows, head, cells(row) -> [Node|value], search(row) -> text, sorts {name: fn},
    // filters {name: fn}
    var state = { page: 0, sort: Object.keys(spec.sorts)[0], filter: "all", q: "" };
    var body = el("tbody");
    var count = el("span", { id: spec.id + "-count", cls: "count" });
    var pager = el("span", { cls: "pager" });
    var view = spec.rows;
    function rebuild() {
      var q = state.q.toLowerCase(), f = spec.filters[state.filter];
      view = spec.rows.filter(function (r) {
        return (!f || f(r)) && (!q || spec.search(r).toLowerCase().indexOf(q) >= 0);
      });
      view.sort(spec.sorts[state.sort]);
      state.page = 0;
      draw();
    }
    function draw() {
      var pages = Math.max(1, Math.ceil(view.length / PAGE));
      state.page = Math.min(state.page, pages - 1);
      body.textContent = "";
      view.slice(state.page * PAGE, (state.page + 1) * PAGE).forEach(function (r) {
        body.appendChild(el("tr", { cls: "clip" }, spec.cells(r).map(function (c) {
          return c instanceof Node ? el("td", {}, [c]) : el("td", { text: show(c) });
        })));
      });
      count.textContent = view.length + " of " + spec.rows.length + " clips";
      pager.textContent = "";
      var prev = el("button", { type: "button", text: "‹ previous" });
      var next = el("button", { type: "button", text: "next ›" });
      prev.disabled = state.page === 0; next.disabled = state.page >= pages - 1;
      prev.onclick = function () { state.page--; draw(); };
      next.onclick = function () { state.page++; draw(); };
      pager.appendChild(prev);
      pager.appendChild(document.createTextNode(" page " + (state.page + 1) + " of " + pages + " "));
      pager.appendChild(next);
    }
    var search = el("input", { type: "search", placeholder: "filter: id, text, speaker…", "aria-label": "filter clips" });
    search.oninput = function () { state.q = search.value; rebuild(); };
    function select(label, options, key) {
      var s = el("select", { "aria-label": label }, options.map(function (o) { return el("option", { value: o, text: o }); }));
      s.onchange = function () { state[key] = s.value; rebuild(); };
      return el("label", {}, [label + " ", s]);
    }
    var controls = el("div", { cls: "controls" }, [
      search, select("show", ["all"].concat(Object.keys(spec.filters).filter(function (k) { return k !== "all"; })), "filter"),
      select("sort by", Object.keys(spec.sorts), "sort"), count, pager]);
    var t = el("table", { cls: "clips", id: spec.id }, [
      el("thead", {}, [el("tr", {}, spec.head.map(function (h) { return el("th", { text: h }); }))]), body]);
    rebuild();
    return el("div", {}, [controls, t]);
  }

  function by(idx, desc) {
    return function (a, b) {
      var x = a[idx], y = b[idx];
      if (x == null && y == null) return 0;
      if (x == null) return 1;
      if (y == null) return -1;
      return (x < y ? -1 : x > y ? 1 : 0) * (desc ? -1 : 1);
    };
  }

  /* --- one run or evaluation ------------------------------------------------------- */
  function single() {
    var ev = D.evaluation;
    var parts = [el("header", {}, [el("h1", { text: D.title }),
      el("p", { cls: "muted", text: (D.kind === "run" ? "training run " : "evaluation ") + D.folder + " · report written " + D.created })])];
    parts.push(summary(ev));
    var curves = curveCharts(D.curves, D.plan);
    if (curves.length) parts.push(section("Training curves", "curves", [el("div", { cls: "charts" }, curves)]));
    if (ev) parts.push(accuracy(ev));
    if (ev) parts.push(hallucination(ev));
    if (ev) parts.push(errorsWhere(ev));
    if (ev) parts.push(section("Clips, worst first", "clip-section", [singleTable(ev)]));
    if (D.kind === "run") parts.push(runDetails());
    parts.forEach(function (p) { app.appendChild(p); });
  }

  function summary(ev) {
    var cards = [];
    function card(label, value, note) {
      cards.push(el("div", { cls: "card" }, [el("div", { cls: "label", text: label }),
        el("div", { cls: "value", text: value }), note ? el("div", { cls: "note", text: note }) : null]));
    }
    if (ev) {
      var m = ev.metric.toUpperCase(), mt = ev.metrics || {};
      card(m + (ev.before ? " after" : ""), pct(mt[ev.metric]), (mt.n_utterances || ev.rows.length) + " clips, " + mt.errors + " errors in " + mt.ref_units + " " + (mt.units || ""));
      if (ev.before) card(m + " before", pct(ev.before[ev.metric]), "the starting model on the same clips");
      if (ev.change) card("difference", pts(ev.change.difference), ev.change.low == null ? "" :
        "95% interval " + pts(ev.change.low) + " to " + pts(ev.change.high) + "; " + ev.change.better + " clips better, " + ev.change.worse + " worse");
    }
    if (D.regression && D.regression.difference) {
      card("regression set", pts(D.regression.difference[D.regression.metric]), "change on " + D.regression.n_utterances + " clips it did not train on");
    }
    if (D.progress && D.progress.global_step != null) card("steps", D.progress.global_step + " of " + D.progress.max_steps, "epoch " + num(D.progress.epoch));
    return el("div", { cls: "cards" }, cards);
  }

  function accuracy(ev) {
    var m = ev.metric, rows = [], mt = ev.metrics || {};
    if (ev.before) rows.push(["before fine-tuning (held-out)", pct(ev.before[m]), ev.before.errors, "", ""]);
    rows.push([ev.before ? "after fine-tuning (held-out)" : "this model", pct(mt[m]), mt.errors, ev.change ? interval(ev.change) : "", ev.change ? ev.change.better + " / " + ev.change.worse + " / " + ev.change.same : ""]);
    if (D.short_window) rows.push(["after, short encoder window", pct(D.short_window[m]), D.short_window.errors, "", ""]);
    var r = D.regression;
    if (r && r.before) {
      rows.push(["regression set, before", pct(r.before[r.metric]), r.before.errors, "", ""]);
      rows.push(["regression set, after", pct(r.after[r.metric]), r.after.errors, interval(r.change), r.change ? r.change.better + " / " + r.change.worse + " / " + r.change.same : ""]);
    }
    var kids = [table(["set", m.toUpperCase(), "errors", "difference", "clips better / worse / same"], rows, "accuracy")];
    kids.push(el("p", { cls: "muted", text: "normaliser: " + (mt.normalizer || "–") + "; substitutions " + mt.substitutions + ", deletions " + mt.deletions + ", insertions " + mt.insertions + (mt.skipped_rows ? "; " + mt.skipped_rows + " rows skipped" : "") }));
    if (r && r.language_id) kids.push(el("p", { text: "language identification on the regression set (as transcribe detects it without --language): " + pct(r.language_id.before.share) + " right before, " + pct(r.language_id.after.share) + " after, of " + r.language_id.after.clips + " clips" }));
    if (mt.script) kids.push(el("p", { text: "script share: " + pct(mt.script.share) + " of the output in " + (mt.script.script || "the expected script") + " (references: " + pct(mt.script.reference_share) + ")" }));
    if (ev.by_language && ev.by_language.length > 1) kids.push(groupTable("by language", ev.by_language));
    return section("Accuracy", "accuracy", kids);
  }

  function groupTable(what, groups) {
    return table([what, "clips", "errors", "units", "rate"], groups.map(function (g) {
      return [g.group, g.clips, g.errors, g.units, pct(g.rate)];
    }), "groups");
  }

  function hallucination(ev) {
    var h = ev.hallucination || {};
    return section("Signs of hallucination", "hallucination", [
      table(["sign", "clips"], Object.keys(h).map(function (k) { return [k, h[k]]; })),
      el("p", { cls: "muted", text: "repeats: a word or pair of words said 3 times or more in a row where the reference does not; short clip: text on a clip under 1 s; generation limit: the output never ended." })]);
  }

  function errorsWhere(ev) {
    var kids = [];
    var sep = ev.metric === "cer" ? "" : " ";
    if (ev.confusions.length) kids.push(el("div", {}, [el("h3", { text: "Most frequent errors" }),
      table(["kind", "reference", "hypothesis", "times"], ev.confusions.map(function (c) {
        return [{ S: "substitution", D: "deletion", I: "insertion" }[c[0]], c[1] || "–", c[2] || "–", c[3]];
      }), "confusions")]));
    if (ev.by_duration.length) kids.push(el("div", {}, [el("h3", { text: "By clip duration" }), groupTable("duration", ev.by_duration)]));
    if (ev.by_speaker.length) kids.push(el("div", {}, [el("h3", { text: "By speaker" }), groupTable("speaker", ev.by_speaker.slice(0, 50))]));
    return section("Where the errors are", "errors-where", [el("div", { cls: "grid" }, kids)]);
  }

  function singleTable(ev) {
    var c = {}; ev.columns.forEach(function (k, i) { c[k] = i; });
    var sep = ev.metric === "cer" ? "" : " ";
    var hasBefore = ev.rows.some(function (r) { return r[c.before_errors] != null; });
    var head = ["clip", "audio", "s", "speaker", "lang", "errors", "rate", "S/D/I"].concat(hasBefore ? ["before"] : []).concat(["reference → hypothesis", "signs"]);
    var searchText = function (r) {
      return [r[c.id], r[c.speaker], r[c.language]].concat(r[c.ops].map(function (o) { return o[1] + " " + o[2]; })).join(" ");
    };
    return clipTable({
      id: "clip-table", rows: ev.rows.slice(), head: head, search: searchText,
      cells: function (r) {
        return [clipName(r[c.id]), audioCell(r[c.audio]), num(r[c.duration], 1), r[c.speaker], r[c.language],
          r[c.errors] + " / " + r[c.units], pct(r[c.rate]), r[c.S] + "/" + r[c.D] + "/" + r[c.I]]
          .concat(hasBefore ? [r[c.before_errors]] : [])
          .concat([alignment(r[c.ops], sep), r[c.flags].join(", ")]);
      },
      sorts: {
        "most errors": function (a, b) { return b[c.errors] - a[c.errors] || (b[c.rate] || 0) - (a[c.rate] || 0); },
        "highest rate": by(c.rate, true), "longest": by(c.duration, true), "shortest": by(c.duration, false),
        "clip id": by(c.id, false), "speaker": by(c.speaker, false),
      },
      filters: {
        "with errors": function (r) { return r[c.errors] > 0; },
        "without errors": function (r) { return r[c.errors] === 0; },
        "with a hallucination sign": function (r) { return r[c.flags].length > 0; },
        "worse than before": function (r) { return r[c.before_errors] != null && r[c.errors] > r[c.before_errors]; },
        "better than before": function (r) { return r[c.before_errors] != null && r[c.errors] < r[c.before_errors]; },
      },
    });
  }

  function runDetails() {
    var kids = [];
    var dr = D.data_report || {};
    var rows = Object.keys(dr).map(function (split) {
      var s = dr[split], probs = s.problems || {};
      return [split, s.manifest, s.rows, s.used, D.hours && D.hours[split] != null ? num(D.hours[split], 2) : "–",
        Object.keys(probs).map(function (k) { return k + ": " + probs[k]; }).join(", ") || "none"];
    });
    if (rows.length) kids.push(el("h3", { text: "Data" }), table(["set", "manifest", "rows", "clips used", "hours", "skipped, why"], rows));
    var skipped = [];
    Object.keys(D.skipped_rows || {}).forEach(function (split) {
      D.skipped_rows[split].forEach(function (s) { skipped.push([split, s.where, s.problems, s.details]); });
    });
    if (skipped.length) kids.push(el("details", {}, [el("summary", { text: skipped.length + " rows left out" }), table(["set", "where", "problem", "details"], skipped)]));
    if (D.encoder_input) kids.push(el("h3", { text: "Encoder input" }), keyValues(D.encoder_input));
    if (D.plan) kids.push(el("h3", { text: "Memory plan" }), keyValues({ "predicted peak (GiB)": D.plan.predicted_gib, "usable (GiB)": D.plan.usable_gib, "budget (GiB)": D.plan.budget_gib }), keyValues(D.plan.settings));
    Object.keys(D.options || {}).forEach(function (s) {
      kids.push(el("details", {}, [el("summary", { text: s + " options" }), keyValues(D.options[s])]));
    });
    if (D.versions) kids.push(el("details", {}, [el("summary", { text: "versions" }), keyValues(D.versions)]));
    return section("The run", "run", kids);
  }

  /* --- two runs side by side ------------------------------------------------------- */
  // One chart per figure with both runs' lines, over the union of their steps.
  function overlays(A, B) {
    function evalKey(c) {
      return Object.keys(c.eval || {}).filter(function (k) { return k !== "eval_loss" && !/_raw$/.test(k); })[0];
    }
    function memKey(c) {
      var m = c.memory || {};
      return m.mem_peak_allocated_mib ? "mem_peak_allocated_mib" : "mem_rss_mib";
    }
    var figures = [
      ["training loss", function (c) { return [c.step, c.loss]; }],
      ["learning rate", function (c) { return [c.step, c.learning_rate]; }],
      ["evaluation error rate", function (c) { var k = evalKey(c); return [c.eval_step, k && c.eval[k]]; }],
      ["memory per logging step (MiB)", function (c) { return [c.step, (c.memory || {})[memKey(c)]]; }],
      ["clips per second", function (c) { return [c.step, c.clips_per_second]; }],
    ];
    var out = [];
    figures.forEach(function (f) {
      var parts = [A, B].map(function (s) { return s.curves && s.curves.step ? f[1](s.curves) : [[], null]; });
      var steps = {};
      parts.forEach(function (p) { (p[1] ? p[0] : []).forEach(function (x) { steps[x] = 1; }); });
      var xs = Object.keys(steps).map(Number).sort(function (a, b) { return a - b; });
      var series = parts.map(function (p, i) {
        var at = {};
        (p[1] ? p[0] : []).forEach(function (x, j) { at[x] = p[1][j]; });
        return { label: (i ? "B: " + B.title : "A: " + A.title), values: xs.map(function (x) { return x in at ? at[x] : null; }) };
      });
      var c = chart(f[0], xs, series);
      if (c) out.push(c);
    });
    return out;
  }

  function pair() {
    var A = D.sides[0], B = D.sides[1], ch = D.change;
    app.appendChild(el("header", {}, [el("h1", { text: D.title }), el("p", { cls: "muted", text: "A: " + A.folder + " · B: " + B.folder + " · differences are B minus A · written " + D.created })]));
    var m = (A.metric || "wer");
    app.appendChild(el("div", { cls: "cards" }, [
      el("div", { cls: "card" }, [el("div", { cls: "label", text: "A " + m.toUpperCase() }), el("div", { cls: "value", text: pct((A.metrics || {})[m]) }), el("div", { cls: "note", text: A.title })]),
      el("div", { cls: "card" }, [el("div", { cls: "label", text: "B " + m.toUpperCase() }), el("div", { cls: "value", text: pct((B.metrics || {})[m]) }), el("div", { cls: "note", text: B.title })]),
      el("div", { cls: "card" }, [el("div", { cls: "label", text: "B minus A" }), el("div", { cls: "value", text: pts(ch.difference) }),
        el("div", { cls: "note", text: (ch.low == null ? "" : "95% interval " + pts(ch.low) + " to " + pts(ch.high) + "; ") + ch.better + " clips better, " + ch.worse + " worse, " + ch.same + " the same" })]),
    ]));
    if (D.option_differences.length) app.appendChild(section("Options that differ", "options", [table(["option", "A", "B"], D.option_differences)]));
    var curves = overlays(A, B);
    if (curves.length) app.appendChild(section("Training curves, A and B on one chart", "curves", [el("div", { cls: "charts" }, curves)]));
    var c = {}; D.columns.forEach(function (k, i) { c[k] = i; });
    var sep = m === "cer" ? "" : " ";
    app.appendChild(section("Clip by clip", "clip-section", [clipTable({
      id: "clip-table", rows: D.rows.slice(),
      head: ["clip", "audio", "s", "speaker", "errors A", "errors B", "change", "A: reference → hypothesis", "B: reference → hypothesis"],
      search: function (r) { return [r[c.id], r[c.speaker], r[c.change]].join(" "); },
      cells: function (r) {
        return [clipName(r[c.id]), audioCell(r[c.audio]), num(r[c.duration], 1), r[c.speaker], r[c.errors_a], r[c.errors_b],
          el("span", { cls: "change-" + r[c.change], text: r[c.change] }), alignment(r[c.ops_a], sep), alignment(r[c.ops_b], sep)];
      },
      sorts: {
        "biggest change": function (a, b) { return Math.abs(b[c.errors_b] - b[c.errors_a]) - Math.abs(a[c.errors_b] - a[c.errors_a]); },
        "most errors in B": by(c.errors_b, true), "most errors in A": by(c.errors_a, true), "clip id": by(c.id, false),
      },
      filters: {
        "better in B": function (r) { return r[c.change] === "better"; },
        "worse in B": function (r) { return r[c.change] === "worse"; },
        "the same": function (r) { return r[c.change] === "same"; },
      },
    })]));
  }

  try {
    if (D.kind === "pair") pair(); else single();
    if (app.firstChild && app.firstChild.tagName === "P") app.removeChild(app.firstChild);
    charts.forEach(function (draw) { draw(); });
  } finally {
    document.body.setAttribute("data-charts", String(document.querySelectorAll("figure.chart").length));
    document.body.setAttribute("data-render-ms", String(Math.round(performance.now())));
    document.body.setAttribute("data-ready", "1");
  }
})();
