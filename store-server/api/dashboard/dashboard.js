// posgate store dashboard: reads the manager API every few seconds and draws it. Every
// value is put in the page as text (never as HTML). Amounts arrive as decimal strings in
// yuan and are shown as they are, grouped (I18N.amount): the page does no arithmetic on
// money. Every word comes from the message catalog of the page's language (i18n.js).
"use strict";

const t = I18N.t;

const REFRESH_MS = 5000;
const TOKEN_KEY = "posgate-token";

// The manager API endpoints the page reads (the store-server's tests check each exists).
const ENDPOINTS = {
  mode: "/v1/mode",
  totals: "/v1/totals",
  terminals: "/v1/terminals",
  stock: "/v1/stock",
  oversells: "/v1/oversells",
  prices: "/v1/price-exceptions",
  flows: "/v1/flow-exceptions",
  refundExceptions: "/v1/refund-exceptions",
  parked: "/v1/parked",
  limits: "/v1/limits",
  hq: "/v1/hq",
  sales: "/v1/charts/sales",
  history: "/v1/charts/history",
};

// The changes the page makes (POST): a manager resolves an oversell, a price exception, a flow exception, a
// refund exception or a parked event, or books a shelf count (the store books the difference from the ledger's
// stock).
const ACTIONS = {
  resolveOversell: "/v1/oversells/resolve",
  resolvePrice: "/v1/price-exceptions/resolve",
  resolveFlow: "/v1/flow-exceptions/resolve",
  resolveRefundException: "/v1/refund-exceptions/resolve",
  resolveParked: "/v1/parked/resolve",
  countStock: "/v1/stock/count",
};

const $ = (id) => document.getElementById(id);

class Unauthorized extends Error {}

async function api(path, body) {
  const init = {
    headers: { Authorization: "Bearer " + sessionStorage.getItem(TOKEN_KEY) },
    cache: "no-store",
  };
  if (body !== undefined) {
    init.method = "POST";
    init.headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(body);
  }
  const resp = await fetch(path, init);
  if (resp.status === 401) throw new Unauthorized();
  const answer = await resp.json();
  if (!resp.ok) throw new Error(errorText(answer, resp.status));
  return answer;
}

// errorText is an error answer in the page's language: the catalog's words for its code,
// else the store's own detail.
function errorText(answer, status) {
  const key = "error." + (answer && answer.code);
  const own = t(key);
  if (answer && answer.code && own !== key) return own;
  return (answer && (answer.detail || answer.title)) || String(status);
}

// el builds an element with text content and an optional class.
function el(tag, text, cls) {
  const e = document.createElement(tag);
  if (text !== undefined && text !== null) e.textContent = String(text);
  if (cls) e.className = cls;
  return e;
}

function row(cells) {
  const tr = document.createElement("tr");
  for (const c of cells) tr.append(c instanceof Node ? c : el("td", c));
  return tr;
}

function fill(tableId, rows, emptyText) {
  const body = $(tableId).querySelector("tbody");
  body.replaceChildren(...rows);
  if (rows.length === 0) {
    const td = el("td", emptyText, "muted");
    td.colSpan = $(tableId).querySelectorAll("th").length;
    body.append(row([td]));
  }
}

const yuan = (s) => I18N.amount(s);

// ago says how long before now a time was ("3 s ago", "2 h ago").
function ago(iso, now) {
  if (!iso) return "—";
  const s = Math.max(0, Math.round((now - Date.parse(iso)) / 1000));
  if (s < 60) return t("ago.s", { n: s });
  if (s < 3600) return t("ago.min", { n: Math.round(s / 60) });
  if (s < 86400) return t("ago.h", { n: Math.round(s / 3600) });
  return t("ago.d", { n: Math.round(s / 86400) });
}

// storeTime shows a time as the API gives it, in the store's zone (--tz): the wall clock of
// the store, as its business dates are taken, whatever zone the browser is set to. "—" for
// none (a time the store could not read is the zero time).
function storeTime(iso) {
  if (!iso || iso.startsWith("0001-")) return "—";
  const m = /^(\d{4}-\d{2}-\d{2})T(\d{2}:\d{2}:\d{2})/.exec(iso);
  return m ? m[1] + " " + m[2] : iso;
}

// gib shows a byte count in GiB (sizes, not money).
const gib = (n) => (n / 2 ** 30).toFixed(1) + " GiB";

function duration(ms) {
  const s = Math.round(ms / 1000);
  if (s < 60) return t("dur.s", { n: s });
  if (s < 3600) return t("dur.min", { n: Math.round(s / 60) });
  return t("dur.h", { n: (s / 3600).toFixed(1) });
}

// skew says how far a till's clock is from the store's: "on time" within a second,
// otherwise "3 min behind" or "1.0 d ahead".
function skew(ms) {
  const a = Math.abs(ms);
  if (a < 1000) return t("clock.ontime");
  const d = a >= 86400000 ? t("dur.d", { n: (a / 86400000).toFixed(1) }) : duration(a);
  return t(ms < 0 ? "clock.behind" : "clock.ahead", { d });
}

function figure(label, value, cls) {
  const d = el("div", label);
  d.prepend(el("b", value, cls));
  return d;
}

function drawMode(mode, alerts) {
  const badge = $("mode");
  badge.textContent = t("mode." + mode.mode);
  badge.className = "badge " + mode.mode;
  if (mode.mode === "degraded") {
    alerts.push([t("alert.degraded"), ""]);
  } else if (mode.mode !== "redis") {
    alerts.push([t("alert.rebuilding", { mode: t("mode." + mode.mode) }), "warn"]);
  }
  const d = mode.disk;
  if (d && d.low) {
    alerts.push([t("alert.disk", { free: gib(d.free_bytes), total: gib(d.total_bytes), ledger: gib(d.ledger_bytes) }), ""]);
  }
  const st = mode.stats;
  if (st.gate_refused) alerts.push([t("alert.gate_refused", { why: st.gate_refused }), ""]);
  if (st.projection_drift) {
    alerts.push([t("alert.drift", { n: st.projection_drift, reason: st.last_drift, at: st.last_drift_at }), "warn"]);
  }
  if (st.last_commit_error) {
    alerts.push([t("alert.commit", { n: st.commit_errors, at: st.last_commit_error_at, error: st.last_commit_error }), ""]);
  }
}

function drawDay(totals) {
  if (!chosenDay) $("day").value = totals.business_date;
  const s = totals.store;
  const figs = [
    figure(t("day.sales"), s.sales),
    figure(t("day.takings"), yuan(s.amount)),
    figure(t("day.refunds"), s.refunds),
    figure(t("day.refunded"), yuan(s.refund_amount)),
  ];
  for (const [method, amount] of Object.entries(s.by_method || {}).sort()) {
    figs.push(figure(t("method." + method), yuan(amount)));
  }
  $("today").replaceChildren(...figs);
}

// holding is what a till last said it holds that the store has not acknowledged: its
// backlog report, which it publishes beside its events (oldest_now_ms has aged since), or,
// from an agent of an earlier release, its last heartbeat, which went behind the events it
// counted. null when it said neither.
function holding(t) {
  if (t.backlog) return { events: t.backlog.events, oldestMs: t.backlog.oldest_now_ms, heard: t.backlog.heard };
  if (t.heartbeat) return { events: t.heartbeat.backlog, oldestMs: t.heartbeat.oldest_age_ms, heard: t.heartbeat.received };
  return null;
}

// backlogCells are a till's Backlog and Oldest unsent cells: what it holds while it is
// online; while it is not known to be online, "unknown since HH:MM (last report N)" — its
// last report, never shown as a current figure.
function backlogCells(tl, held, now) {
  if (tl.backlog_unknown_since) {
    const since = storeTime(tl.backlog_unknown_since).slice(11, 16);
    const cell = el("td", held ? t("backlog.unknown", { since, n: held.events }) : t("backlog.unknown.none", { since }), "num warn");
    cell.title = t("backlog.unknown.title");
    return [cell, el("td", "—", "muted")];
  }
  if (!held) return [el("td", "—", "num muted"), el("td", "—")];
  const oldest = held.events > 0 ? duration(held.oldestMs) + " (" + ago(held.heard, now) + ")" : "—";
  return [el("td", held.events, "num" + (held.events > 0 ? " warn" : "")), el("td", oldest)];
}

// catalogCell shows the catalog version a till said it holds (its backlog report or
// heartbeat), against the store's.
function catalogCell(tl) {
  if (tl.catalog_version === undefined || tl.catalog_version === null) return el("td", "—", "muted");
  const c = el("td", "v" + tl.catalog_version, tl.catalog_behind || tl.catalog_ahead ? "warn" : "");
  if (tl.catalog_behind) c.title = t("catalog.behind");
  if (tl.catalog_ahead) c.title = t("catalog.ahead");
  return c;
}

function drawTerminals(view, totals, alerts) {
  const now = Date.parse(view.now);
  const day = new Map(totals.terminals.map((x) => [x.terminal, x]));
  const names = new Set([...view.terminals.map((x) => x.terminal), ...day.keys()]);
  const byName = new Map(view.terminals.map((x) => [x.terminal, x]));
  const rows = [];
  for (const name of [...names].sort()) {
    const tl = byName.get(name) || { terminal: name };
    const d = day.get(name);
    let conn = el("td", t("conn.unknown"), "muted");
    if (tl.online === true) conn = el("td", t("conn.online"), "good");
    if (tl.online === false) conn = el("td", t("conn.offline", { ago: ago(tl.status_heard, now) }), "bad");
    const last = tl.last_seq ? t("last.event", { kind: t("kind." + tl.last_kind), seq: tl.last_seq, ago: ago(tl.last_received, now) }) : "—";
    const held = holding(tl);
    const [backlog, oldest] = backlogCells(tl, held, now);
    const parked = el("td", tl.parked || 0, "num" + (tl.parked ? " bad" : ""));
    let redis = el("td", "—", "muted");
    let close = el("td", "—", "muted");
    if (d) {
      if (d.redis) redis = d.redis_differs ? el("td", t("differs"), "bad") : el("td", t("matches"), "good");
      else if (totals.redis_not_compared) redis.title = t("redis.not." + totals.redis_not_compared);
      if (d.declared) close = d.declared_matches ? el("td", t("matches"), "good") : el("td", t("differs"), "bad");
    }
    // The till's clock against the store's: the till dates its sales by it (business day).
    // "—" when the store heard nothing to measure it by in the last 5 minutes; "checking"
    // while what it heard says the till is behind but may be messages held on their way.
    const hasClock = tl.clock_skew_ms !== undefined && tl.clock_skew_ms !== null;
    let clock = hasClock ? el("td", skew(tl.clock_skew_ms), tl.clock_off ? "bad" : "") : el("td", "—", "muted");
    if (tl.clock_unconfirmed) {
      clock = el("td", t("clock.checking"), "muted");
      clock.title = t("clock.checking.title", { d: duration(view.clock_behind_confirm_ms) }) + " ";
    }
    if (tl.clock_checked) clock.title = (clock.title || "") + t("clock.measured", { at: storeTime(tl.clock_checked) });
    rows.push(row([el("td", name), conn, el("td", last), backlog, oldest, catalogCell(tl), parked,
      el("td", d ? d.ledger.sales : 0, "num"), el("td", yuan(d ? d.ledger.amount : "0.00"), "num"), redis, close, clock]));

    if (tl.clock_off) {
      alerts.push([t(tl.clock_skew_ms < 0 ? "alert.clock.behind" : "alert.clock.ahead",
        { till: name, d: skew(tl.clock_skew_ms), limit: duration(view.clock_skew_limit_ms) }), ""]);
    }
    if (tl.online === false && held && held.events > 0) {
      alerts.push([t("alert.offline", { till: name, n: held.events }), "warn"]);
    }
    if (d && d.redis_differs) alerts.push([t("alert.redis", { till: name, date: totals.business_date }), ""]);
    if (d && d.declared && !d.declared_matches) alerts.push([t("alert.close", { till: name }), ""]);
  }
  fill("terminals", rows, t("terminals.none"));
}

// drawStock shows the polled stock (without the proof, which reads the whole history) and,
// once the manager asked for it, the proof from the stock moves as of when it was taken.
function drawStock(stock) {
  const filter = $("sku-filter").value.trim().toUpperCase();
  const rows = stock.stock
    .filter((s) => !filter || s.sku.toUpperCase().includes(filter))
    .map((s) => {
      const p = proof && proof.rows.get(s.sku);
      const proven = p ? el("td", p.proven, "num" + (p.proven !== p.ledger ? " bad" : "")) : el("td", "—", "num muted");
      const button = el("button", t("stock.count"), "write");
      button.addEventListener("click", () => countShelf(s));
      const action = el("td");
      action.append(button);
      return row([
        el("td", s.sku),
        s.unknown
          ? el("td", t("stock.unknown", { qty: s.ledger }), "num bad")
          : el("td", s.ledger, "num" + (s.ledger < 0 ? " bad" : "")),
        proven,
        el("td", s.redis === undefined ? "—" : s.redis, "num"),
        el("td", s.redis === undefined ? "—" : s.diff, "num" + (s.diff ? " bad" : "")),
        action,
      ]);
    });
  fill("stock", rows, filter ? t("stock.nomatch") : t("stock.none"));
  $("proof-at").textContent = proof ? t("stock.asof", { time: proof.at.toLocaleTimeString(I18N.lang()) }) : "";
}

// countShelf books what the manager counted on the shelf (whole units). It sends the count,
// not a difference from the stock shown: the table may be seconds old, and the prompt stays
// open while the manager counts, so sales since then are in the shelf already; the ledger
// books the difference from its own stock at that moment. The id makes the count
// idempotent: a retried request is booked once.
async function countShelf(s) {
  const answer = prompt(t("count.prompt", { sku: s.sku, ledger: s.ledger }));
  if (answer === null) return;
  // The ledger books a count of up to 10^12 units (MaxAdjust).
  if (!/^\d{1,13}$/.test(answer.trim()) || Number(answer.trim()) > 1e12) {
    alert(t("count.invalid"));
    return;
  }
  const counted = Number(answer.trim());
  // An offline till's sales have left the shelf but not the ledger: booked now, the count
  // takes them off once, and their arrival a second time. So have those an online till is
  // still sending after being offline (its backlog report). A till not heard since the
  // store started (the broker keeps no status across a restart) may be offline too.
  const tills = [];
  if (offlineTills.length > 0) tills.push(t("count.offline", { tills: offlineTills.join(", ") }));
  if (sendingTills.length > 0) tills.push(t("count.sending", { tills: sendingTills.join(", ") }));
  const warning = tills.length > 0 ? "\n\n" + tills.join(" ") + " " + t("count.warning") : "";
  if (!confirm(t("count.confirm", { n: counted, sku: s.sku, ledger: s.ledger }) + warning)) return;
  const rnd = new Uint8Array(8);
  crypto.getRandomValues(rnd);
  const id = "count-" + s.sku + "-" + Array.from(rnd, (b) => b.toString(16).padStart(2, "0")).join("");
  try {
    const booked = await api(ACTIONS.countStock, { id: id, sku: s.sku, counted: counted });
    proof = null; // it no longer describes the stock: prove again
    alert(booked.delta === 0 ? t("count.agreed", { sku: s.sku, n: counted, qty: booked.qty }) :
      t("count.booked", { sku: s.sku, n: counted, delta: (booked.delta > 0 ? "+" : "") + booked.delta, qty: booked.qty }));
  } catch (e) {
    if (e instanceof Unauthorized) return signOut(t("error.refused"));
    alert(t("count.failed", { error: e.message }));
  }
  refresh();
}

// proveStock asks the store for each SKU's proof from every stock move it holds (a read of
// the whole history: on demand, not every refresh).
async function proveStock() {
  $("prove").disabled = true;
  try {
    const full = await api(ENDPOINTS.stock);
    proof = { at: new Date(), rows: new Map(full.stock.map((s) => [s.sku, s])) };
    if (lastStock) drawStock(lastStock);
  } catch (e) {
    if (e instanceof Unauthorized) return signOut(t("error.refused"));
    alert(t("stock.proof.failed", { error: e.message }));
  } finally {
    $("prove").disabled = false;
  }
}

function drawOversells(o) {
  fill("oversells", o.oversells.map((x) => {
    const button = el("button", t("resolve"), "write");
    button.addEventListener("click", () => resolveOversell(x));
    const action = el("td");
    action.append(button);
    return row([x.business_date, x.terminal, x.seq, x.sku, el("td", x.short, "num bad"),
      storeTime(x.at), action]);
  }), t("none"));
}

// resolveOversell asks what explained the shortfall and records it. Stock is corrected by
// a shelf count (POST /v1/stock/count), not here.
async function resolveOversell(x) {
  const note = prompt(t("oversell.prompt", { n: x.short, sku: x.sku, till: x.terminal, seq: x.seq }));
  if (note === null) return;
  try {
    await api(ACTIONS.resolveOversell, { terminal: x.terminal, seq: x.seq, sku: x.sku, note: note });
  } catch (e) {
    if (e instanceof Unauthorized) return signOut(t("error.refused"));
    alert(t("resolve.failed", { error: e.message }));
  }
  refresh();
}

function drawPrices(p) {
  fill("prices", p.price_exceptions.map((x) => {
    const button = el("button", t("resolve"), "write");
    button.addEventListener("click", () => resolvePrice(x));
    const action = el("td");
    action.append(button);
    return row([x.business_date, x.terminal, x.seq, x.sku, el("td", x.code, "bad"), el("td", x.qty, "num"),
      el("td", I18N.amount(x.sold_price), "num"), el("td", I18N.amount(x.catalog_price), "num"),
      el("td", I18N.amount(x.difference), "num bad"),
      x.sale_catalog_version + " / " + x.store_catalog_version, storeTime(x.at), action]);
  }), t("none"));
}

// resolvePrice asks what explained a sale at another price than the catalog's and records
// it. The sale stands as the customer paid it.
async function resolvePrice(x) {
  const note = prompt(t("price.prompt", { n: x.qty, sku: x.sku, sold: x.sold_price, catalog: x.catalog_price,
    till: x.terminal, seq: x.seq }));
  if (note === null) return;
  try {
    await api(ACTIONS.resolvePrice, { terminal: x.terminal, seq: x.seq, sku: x.sku, note: note });
  } catch (e) {
    if (e instanceof Unauthorized) return signOut(t("error.refused"));
    alert(t("resolve.failed", { error: e.message }));
  }
  refresh();
}

function drawFlows(f) {
  fill("flows", f.flow_exceptions.map((x) => {
    const button = el("button", t("resolve"), "write");
    button.addEventListener("click", () => resolveFlow(x));
    const action = el("td");
    action.append(button);
    return row([x.business_date, x.terminal, x.seq, x.kind, el("td", x.flow_given, "num bad"),
      el("td", x.flow_booked, "num"), x.held_by || "—", storeTime(x.at), action]);
  }), t("none"));
}

// resolveFlow asks how the two receipts that print one flow number were told apart and
// records it. The sale stands under the number the ledger booked it.
async function resolveFlow(x) {
  const note = prompt(t("flow.prompt", { given: x.flow_given, booked: x.flow_booked, till: x.terminal, seq: x.seq,
    held: x.held_by || "—" }));
  if (note === null) return;
  try {
    await api(ACTIONS.resolveFlow, { terminal: x.terminal, seq: x.seq, note: note });
  } catch (e) {
    if (e instanceof Unauthorized) return signOut(t("error.refused"));
    alert(t("resolve.failed", { error: e.message }));
  }
  refresh();
}

function drawRefundExceptions(r) {
  fill("refund-exceptions", r.refund_exceptions.map((x) => {
    const button = el("button", t("resolve"), "write");
    button.addEventListener("click", () => resolveRefundException(x));
    const action = el("td");
    action.append(button);
    return row([x.business_date, x.terminal, x.seq, el("td", x.code, "bad"), el("td", x.detail, "wrap"),
      storeTime(x.at), action]);
  }), t("none"));
}

// resolveRefundException asks what explained a refund the sale does not cover and records
// it. The refund itself stands in the ledger.
async function resolveRefundException(x) {
  const note = prompt(t("refundx.prompt", { till: x.terminal, seq: x.seq, detail: x.detail }));
  if (note === null) return;
  try {
    await api(ACTIONS.resolveRefundException, { terminal: x.terminal, seq: x.seq, hash: x.hash, note: note });
  } catch (e) {
    if (e instanceof Unauthorized) return signOut(t("error.refused"));
    alert(t("resolve.failed", { error: e.message }));
  }
  refresh();
}

// PARKED_SHOWN is how many parked events the table lists, the most recently parked.
const PARKED_SHOWN = 50;

function drawParked(p) {
  const shown = p.parked.filter((x) => !x.resolved).slice(0, PARKED_SHOWN);
  const open = typeof p.open === "number" ? p.open : shown.length;
  $("parked-more").textContent = open > shown.length ? t("parked.more", { shown: shown.length, open }) : "";
  fill("parked", shown.map((x) => {
    const button = el("button", t("resolve"), "write");
    button.addEventListener("click", () => resolveParked(x));
    const action = el("td");
    action.append(button);
    return row([x.business_date, x.terminal, x.seq, x.kind || "—", el("td", x.code, "bad"), el("td", x.message, "wrap"),
      storeTime(x.at), action]);
  }), t("none"));
}

// resolveParked asks what explained an event the store refused for good, which the till
// kept (its day close counts it), and records it. The event stays refused.
async function resolveParked(x) {
  // A key can be parked with several contents: the hash's start tells them apart.
  const content = x.hash ? t("parked.content", { hash: x.hash.slice(0, 8) }) : "";
  const note = prompt(t("parked.prompt", { kind: x.kind ? t("kind." + x.kind) : t("parked.event"), till: x.terminal, seq: x.seq,
    content, message: x.message }));
  if (note === null) return;
  try {
    await api(ACTIONS.resolveParked, { terminal: x.terminal, seq: x.seq, hash: x.hash, note: note });
  } catch (e) {
    if (e instanceof Unauthorized) return signOut(t("error.refused"));
    alert(t("resolve.failed", { error: e.message }));
  }
  refresh();
}

function drawLimits(l) {
  const lim = l.limits;
  const per = (what) => t("limits.per", { what: t("limits." + what), ms: lim.window_ms });
  const figs = [
    figure(per("store"), lim.store), figure(per("terminal"), lim.terminal), figure(per("scans"), lim.scan),
    figure(per("payments"), lim.pay), figure(per("refunds"), lim.refund),
    figure(t("limits.promo"), l.promo_percent + "%" + (l.promo_expires_in_ms > 0 ? t("limits.promo.for", { d: duration(l.promo_expires_in_ms) }) : "")),
  ];
  $("limits").replaceChildren(...figs);
}

function drawHQ(a, now, alerts) {
  if (!a.found) {
    $("hq").replaceChildren(el("span", t("hq.none", { state: a.state }), "muted"));
    return;
  }
  const u = a.upload;
  const days = Object.keys(u.declared || {}).sort().slice(-3);
  const figs = [
    figure(t("hq.backlog"), u.backlog, u.backlog > 0 ? "warn" : "good"),
    figure(t("hq.last"), u.last_sent_at ? ago(u.last_sent_at, now) : t("never")),
    figure(t("hq.batches"), u.batches),
    figure(t("hq.declared"), days.length ? days.join(", ") : t("hq.declared.none")),
  ];
  for (const d of Object.keys(u.declaring_in_parts || {}).sort()) {
    const p = u.declaring_in_parts[d];
    figs.push(figure(t("hq.parts", { date: d }), t("hq.parts.sent", { sent: p.sent, parts: p.parts })));
  }
  if (u.pending) figs.push(figure(t("hq.pending", { n: u.attempts || 0 }), u.pending, u.last_error ? "bad" : ""));
  $("hq").replaceChildren(...figs);
  if (u.last_error) alerts.push([t("alert.hq.failing", { error: u.last_error }), ""]);
  for (const d of u.too_large_to_declare || []) {
    alerts.push([t("alert.hq.toolarge", { date: d }), ""]);
  }
  const hour = 3600 * 1000;
  if (u.backlog > 0 && !u.last_error && (!u.last_sent_at || now - Date.parse(u.last_sent_at) > hour)) {
    alerts.push([t("alert.hq.stuck", { n: u.backlog }), "warn"]);
  }
}

let timer = null;
let chosenDay = null; // a business date the manager picked, or null: today
let lastStock = null; // the last stock answer, redrawn as the SKU filter changes
let proof = null; // the last proof of stock the manager asked for: {at, rows by SKU}
const SENDING_MS = 10000;
let offlineTills = []; // the tills not known to be online (status offline, or not heard since the store started)
let sendingTills = []; // online tills whose last backlog report counted events waiting longer than a live sale does
let generation = 0; // of refreshes: an answer to an older one is not drawn

// query adds what a poll asks of an endpoint beyond its path.
function query(name) {
  if ((name === "totals" || name === "sales") && chosenDay) return "?date=" + encodeURIComponent(chosenDay);
  if (name === "stock") return "?proof=0";
  return "";
}

async function refresh() {
  clearTimeout(timer);
  const mine = ++generation;
  const names = Object.keys(ENDPOINTS);
  const results = await Promise.allSettled(names.map((n) => api(ENDPOINTS[n] + query(n))));
  if (mine !== generation) return; // a later refresh (a day picked, a resolution) draws
  if (results.some((r) => r.status === "rejected" && r.reason instanceof Unauthorized)) {
    signOut(t("error.refused"));
    return;
  }
  const got = {};
  const alerts = [];
  names.forEach((n, i) => {
    if (results[i].status === "fulfilled") got[n] = results[i].value;
    else if (n !== "limits") alerts.push([t("alert.read", { what: ENDPOINTS[n], error: results[i].reason.message }), ""]);
  });
  const draw = (name, fn) => {
    if (!got[name]) return;
    try {
      fn();
    } catch (e) {
      alerts.push([t("alert.show", { what: ENDPOINTS[name], error: e.message }), ""]);
    }
  };
  draw("mode", () => {
    drawMode(got.mode, alerts);
    $("store").textContent = t("header.store", { store: got.mode.store }) +
      (got.terminals ? " · " + t("header.catalog", { v: got.terminals.catalog_version }) : "");
  });
  draw("totals", () => drawDay(got.totals));
  draw("terminals", () => {
    drawTerminals(got.terminals, got.totals || { terminals: [] }, alerts);
    offlineTills = got.terminals.terminals.filter((t) => t.online !== true).map((t) => t.terminal).sort();
    // A till selling live holds each sale for the milliseconds it takes the store to answer;
    // one whose oldest unacknowledged event is older than SENDING_MS sold it without the
    // store, offline or while the store did not answer.
    sendingTills = got.terminals.terminals.filter((t) => t.online === true && t.backlog && t.backlog.events > 0 &&
      t.backlog.oldest_now_ms >= SENDING_MS).map((t) => t.terminal).sort();
  });
  draw("stock", () => drawStock(got.stock));
  draw("oversells", () => drawOversells(got.oversells));
  draw("prices", () => drawPrices(got.prices));
  draw("flows", () => drawFlows(got.flows));
  draw("refundExceptions", () => drawRefundExceptions(got.refundExceptions));
  draw("parked", () => drawParked(got.parked));
  draw("hq", () => drawHQ(got.hq, got.terminals ? Date.parse(got.terminals.now) : Date.now(), alerts));
  const offset = got.terminals ? Charts.offsetOf(got.terminals.now) : 0;
  draw("sales", () => Charts.sales(got.sales, offset));
  draw("history", () => Charts.history(got.history));
  if (got.limits) drawLimits(got.limits);
  else $("limits").replaceChildren(el("span", t("limits.unreadable"), "muted"));
  $("alerts").replaceChildren(...alerts.map(([text, cls]) => el("li", text, cls)));
  $("updated").textContent = t("updated", { time: new Date().toLocaleTimeString(I18N.lang()) });
  document.body.dataset.drawn = String(mine);
  lastStock = got.stock || lastStock;
  if (!document.hidden) timer = setTimeout(refresh, REFRESH_MS);
}

function signOut(message) {
  clearTimeout(timer);
  generation++;
  sessionStorage.removeItem(TOKEN_KEY);
  $("board").hidden = true;
  $("signout").hidden = true;
  $("backup").hidden = true;
  $("backup-status").textContent = "";
  $("signin").hidden = false;
  $("signin-error").textContent = message || "";
}

// downloadBackup fetches GET /v1/backup and hands it to the browser as a file, named as
// the store-server names it. The whole file passes through the page's memory: a ledger of
// gigabytes is better fetched with curl (docs/store-server.md, "Backup and restore").
async function downloadBackup() {
  const button = $("backup");
  button.disabled = true;
  $("backup-status").textContent = t("backup.making");
  $("backup-status").className = "muted";
  try {
    const resp = await fetch("/v1/backup", {
      headers: { Authorization: "Bearer " + sessionStorage.getItem(TOKEN_KEY) },
      cache: "no-store",
    });
    if (resp.status === 401) throw new Unauthorized();
    if (!resp.ok) {
      const problem = await resp.json().catch(() => ({}));
      throw new Error(errorText(problem, resp.status));
    }
    const blob = await resp.blob();
    const name = (/filename="([^"]+)"/.exec(resp.headers.get("Content-Disposition") || "") || [])[1] || "posgate-backup.tar";
    const url = URL.createObjectURL(blob);
    const a = el("a");
    a.href = url;
    a.download = name;
    document.body.append(a);
    a.click();
    a.remove();
    setTimeout(() => URL.revokeObjectURL(url), 60000);
    $("backup-status").textContent = t("backup.done", { name, n: blob.size });
  } catch (e) {
    if (e instanceof Unauthorized) { signOut(t("error.refused")); return; }
    $("backup-status").textContent = t("backup.failed", { error: e.message });
    $("backup-status").className = "bad";
  } finally {
    button.disabled = false;
  }
}

// signIn shows what the token's role may do (GET /v1/whoami): the board to a reader, the
// count and resolve buttons to an operator, the backup button to a backup token.
async function signIn() {
  $("signin").hidden = true;
  $("signout").hidden = false;
  let who;
  try {
    who = await api("/v1/whoami");
  } catch (e) {
    if (e instanceof Unauthorized) return signOut(t("error.refused"));
    who = { read: true };
  }
  document.body.dataset.may = ["read", "write", "backup"].filter((m) => who[m]).join(" ");
  $("backup").hidden = !who.backup;
  $("board").hidden = !who.read;
  if (who.read) refresh();
}

// relabel draws the page again in the language just chosen.
function relabel() {
  I18N.apply(document);
  Charts.forget();
  if (sessionStorage.getItem(TOKEN_KEY)) refresh();
}

document.addEventListener("DOMContentLoaded", async () => {
  try {
    await I18N.load(I18N.pick());
  } catch (e) {
    await I18N.load("en");
  }
  I18N.apply(document);
  I18N.switcher($("lang"), relabel);
  window.addEventListener("resize", () => Charts.resize());
  $("signin").addEventListener("submit", (ev) => {
    ev.preventDefault();
    sessionStorage.setItem(TOKEN_KEY, $("token").value);
    $("token").value = "";
    signIn();
  });
  $("signout").addEventListener("submit", (ev) => {
    ev.preventDefault();
    signOut();
  });
  $("sku-filter").addEventListener("input", () => { if (lastStock) drawStock(lastStock); });
  $("prove").addEventListener("click", proveStock);
  $("backup").addEventListener("click", downloadBackup);
  $("day").addEventListener("change", () => {
    chosenDay = $("day").value || null;
    refresh();
  });
  $("today-button").addEventListener("click", () => {
    chosenDay = null;
    refresh();
  });
  document.addEventListener("visibilitychange", () => {
    if (!document.hidden && sessionStorage.getItem(TOKEN_KEY)) refresh();
    else clearTimeout(timer);
  });
  // A back-office screen can be opened as /#token=…: the fragment never reaches the server,
  // and it is taken out of the address bar at once. #date=YYYY-MM-DD opens on that day.
  const frag = new URLSearchParams(location.hash.slice(1));
  if (frag.get("token")) {
    sessionStorage.setItem(TOKEN_KEY, frag.get("token"));
    history.replaceState(null, "", location.pathname);
  }
  if (/^\d{4}-\d{2}-\d{2}$/.test(frag.get("date") || "")) {
    chosenDay = frag.get("date");
    $("day").value = chosenDay;
  }
  if (sessionStorage.getItem(TOKEN_KEY)) signIn();
  else signOut();
});
