// posgate store dashboard: the charts, drawn with uPlot (vendor/uplot, embedded). Times
// are the store's wall clock (its --tz), whatever zone the browser is in. Takings are drawn
// on a scale of whole fen read from the API's decimal text (I18N.fen), never from a
// floating-point amount, and labelled back in yuan with grouping.
"use strict";

const Charts = (() => {
  // Drawn charts by name, for redraws and for the browser tests, which read each one's data.
  const drawn = {};
  window.posgateCharts = drawn;

  const COLORS = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2", "#17becf"];
  const MODES = ["degraded", "starting", "rebuilding", "redis"]; // y of the mode chart, worst lowest

  // offsetOf returns the UTC offset (ms) an ISO time of the API is written in.
  function offsetOf(iso) {
    const m = /([+-])(\d{2}):(\d{2})$/.exec(iso || "");
    if (!m) return 0;
    const ms = (Number(m[2]) * 60 + Number(m[3])) * 60000;
    return m[1] === "-" ? -ms : ms;
  }

  // storeDate makes uPlot show a time as the store's wall clock: a Date whose local fields
  // are the store's.
  function storeDate(offsetMs) {
    return (ts) => {
      const d = new Date(ts * 1000 + offsetMs);
      return new Date(d.getUTCFullYear(), d.getUTCMonth(), d.getUTCDate(), d.getUTCHours(), d.getUTCMinutes(), d.getUTCSeconds());
    };
  }

  // clock writes a time (seconds) as the store's wall clock: "HH:MM", "HH:MM:SS" with the
  // seconds, or with the date too ("full", for the legend).
  function clock(offsetMs, how) {
    return (ts) => {
      if (ts === null || ts === undefined) return "—";
      const iso = new Date(ts * 1000 + offsetMs).toISOString();
      if (how === "full") return iso.slice(0, 10) + " " + iso.slice(11, 19);
      return iso.slice(11, how === "seconds" ? 19 : 16);
    };
  }

  // base is what every chart has: the store's clock on the x axis and in the legend.
  function base(offsetMs) {
    const full = clock(offsetMs, "full");
    const minutes = clock(offsetMs, "minutes");
    const seconds = clock(offsetMs, "seconds");
    return {
      tzDate: storeDate(offsetMs),
      legend: { live: true },
      cursor: { drag: { x: false, y: false } },
      time0: { label: I18N.t("chart.time"), value: (u, ts) => full(ts) },
      // Ticks less than a minute apart show their seconds.
      xaxis: { space: 70, values: (u, splits, axis, space, incr) => splits.map(incr < 60 ? seconds : minutes) },
    };
  }

  // options makes a chart's options from base (b), its series and its y axis.
  function options(b, series, yaxis, extra) {
    return Object.assign({ tzDate: b.tzDate, legend: b.legend, cursor: b.cursor, series: [b.time0, ...series],
      axes: [b.xaxis, yaxis] }, extra || {});
  }

  function width(box) {
    return Math.max(280, Math.floor(box.getBoundingClientRect().width) || 600);
  }

  // draw draws (or redraws) the chart name in its box: a new chart when its series changed,
  // otherwise new data in the old one.
  function draw(name, box, opts, data) {
    const key = JSON.stringify(opts.series.map((s) => s.label)) + "|" + I18N.lang();
    const old = drawn[name];
    if (old && old._key === key) {
      old.setData(data);
      return old;
    }
    if (old) old.destroy();
    box.replaceChildren();
    opts.width = width(box);
    opts.height = 180;
    const u = new uPlot(opts, data, box);
    u._key = key;
    drawn[name] = u;
    return u;
  }

  function line(label, i, extra) {
    // uPlot draws a series' points when they are few and far apart, as one sample alone is.
    return Object.assign({ label, stroke: COLORS[i % COLORS.length], width: 2, spanGaps: false }, extra || {});
  }

  // sales draws sales and takings per minute of the chart's date, beside the last trading day.
  function sales(answer, offsetMs) {
    const t = I18N.t;
    const [y, mo, d] = answer.business_date.split("-").map(Number);
    const xs = answer.minutes.map((m) => {
      const [hh, mm] = m.minute.split(":").map(Number);
      return (Date.UTC(y, mo - 1, d, hh, mm) - offsetMs) / 1000;
    });
    const cmp = answer.compare_date ? t("chart.compare", { date: answer.compare_date }) : t("chart.compare.none");
    const b = base(offsetMs);
    // A lone minute is given a minute each side.
    const minutes = { scales: { x: { time: true, range: (u, lo, hi) => (lo === hi ? [lo - 60, hi + 60] : [lo, hi]) } } };
    draw("sales", document.getElementById("chart-sales"), options(b,
      [line(answer.business_date, 0), line(cmp, 1, { dash: [6, 4] })], { size: 50 }, minutes),
    [xs, answer.minutes.map((m) => m.sales), answer.minutes.map((m) => m.compare_sales)]);
    const money = (u, v) => (v === null || v === undefined ? "—" : I18N.fenText(v));
    draw("takings", document.getElementById("chart-takings"), options(b,
      [line(answer.business_date, 0, { value: money }), line(cmp, 1, { dash: [6, 4], value: money })],
      { size: 90, values: (u, splits) => splits.map((v) => I18N.fenText(v)) }, minutes),
    [xs, answer.minutes.map((m) => I18N.fen(m.takings)), answer.minutes.map((m) => I18N.fen(m.compare_takings))]);
  }

  // history draws the last hour's samples: each till's backlog and oldest unsent event (a
  // gap where the till was offline: unknown), the gate mode and the ack times.
  function history(h) {
    const t = I18N.t;
    const xs = h.times.map((s) => Date.parse(s) / 1000);
    const b = base(offsetOf(h.times[0]));
    const count = (u, v) => (v === null || v === undefined ? "—" : String(v));
    draw("backlog", document.getElementById("chart-backlog"), options(b,
      h.tills.map((x, i) => line(x.terminal, i, { value: count })), { size: 50 }, { scales: { y: { range: (u, lo, hi) => [0, Math.max(5, hi)] } } }),
    [xs, ...h.tills.map((x) => x.events)]);
    const secs = (v) => (v === null || v === undefined ? null : v / 1000);
    const sec = (u, v) => (v === null || v === undefined ? "—" : t("chart.seconds", { n: v.toFixed(1) }));
    draw("oldest", document.getElementById("chart-oldest"), options(b,
      h.tills.map((x, i) => line(x.terminal, i, { value: sec })),
      { size: 60, values: (u, splits) => splits.map((v) => t("chart.seconds", { n: v })) },
      { scales: { y: { range: (u, lo, hi) => [0, Math.max(5, hi)] } } }),
    [xs, ...h.tills.map((x) => x.oldest_ms.map(secs))]);
    draw("mode", document.getElementById("chart-mode"), options(b,
      [line(t("chart.mode"), 2, { paths: uPlot.paths.stepped({ align: 1 }), value: (u, v) => (v === null || v === undefined ? "—" : t("mode." + MODES[v])) })],
      { size: 110, splits: () => MODES.map((m, i) => i), values: (u, splits) => splits.map((v) => t("mode." + MODES[v])) },
      { scales: { y: { range: [-0.2, MODES.length - 0.8] } } }),
    [xs, h.modes.map((m) => MODES.indexOf(m))]);
    const ms = (u, v) => (v === null || v === undefined ? "—" : t("chart.ms", { n: v.toFixed(1) }));
    draw("acks", document.getElementById("chart-acks"), options(b,
      [line("p50", 2, { value: ms }), line("p99", 1, { value: ms })],
      { size: 80, values: (u, splits) => splits.map((v) => t("chart.ms", { n: v })) }),
    [xs, h.ack_p50_ms, h.ack_p99_ms]);
  }

  // resize fits every chart to its box's width.
  function resize() {
    for (const u of Object.values(drawn)) u.setSize({ width: width(u.root.parentElement), height: 180 });
  }

  // forget drops every chart (the language changed: their labels are drawn anew).
  function forget() {
    for (const [name, u] of Object.entries(drawn)) {
      u.destroy();
      delete drawn[name];
    }
  }

  return { sales, history, resize, forget, offsetOf };
})();
