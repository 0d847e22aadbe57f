// posgate store dashboard: reads the manager API every few seconds and draws it. Every
// value is put in the page as text (never as HTML). Amounts arrive as decimal strings in
// yuan and are shown as they are: the page does no arithmetic on money.
"use strict";

const REFRESH_MS = 5000;
const TOKEN_KEY = "posgate-token";

// The manager API endpoints the page reads (the store-server's tests check each exists).
const ENDPOINTS = {
  mode: "/v1/mode",
  totals: "/v1/totals",
  terminals: "/v1/terminals",
  stock: "/v1/stock",
  oversells: "/v1/oversells",
  refundExceptions: "/v1/refund-exceptions",
  parked: "/v1/parked",
  limits: "/v1/limits",
  hq: "/v1/hq",
};

// The changes the page makes (POST): a manager resolves an oversell, a refund exception or
// a parked event, or books a shelf count (the store books the difference from the ledger's
// stock).
const ACTIONS = {
  resolveOversell: "/v1/oversells/resolve",
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
  if (!resp.ok) throw new Error(answer.detail || answer.title || String(resp.status));
  return answer;
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

const yuan = (s) => (s === undefined || s === null ? "—" : "¥" + s);

// ago says how long before now a time was ("3 s ago", "2 h ago").
function ago(iso, now) {
  if (!iso) return "—";
  const s = Math.max(0, Math.round((now - Date.parse(iso)) / 1000));
  if (s < 60) return s + " s ago";
  if (s < 3600) return Math.round(s / 60) + " min ago";
  if (s < 86400) return Math.round(s / 3600) + " h ago";
  return Math.round(s / 86400) + " d ago";
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
  if (s < 60) return s + " s";
  if (s < 3600) return Math.round(s / 60) + " min";
  return (s / 3600).toFixed(1) + " h";
}

// skew says how far a till's clock is from the store's: "on time" within a second,
// otherwise "3 min behind" or "1.0 d ahead".
function skew(ms) {
  const a = Math.abs(ms);
  if (a < 1000) return "on time";
  return (a >= 86400000 ? (a / 86400000).toFixed(1) + " d" : duration(a)) + (ms < 0 ? " behind" : " ahead");
}

function figure(label, value, cls) {
  const d = el("div", label);
  d.prepend(el("b", value, cls));
  return d;
}

function drawMode(mode, alerts) {
  const badge = $("mode");
  badge.textContent = mode.mode;
  badge.className = "badge " + mode.mode;
  if (mode.mode === "degraded") {
    alerts.push(["Redis is unreachable: the store sells on the ledger alone (conservative limits, ledger stock).", ""]);
  } else if (mode.mode !== "redis") {
    alerts.push(["The gate is " + mode.mode + ": Redis is being rebuilt from the ledger.", "warn"]);
  }
  const d = mode.disk;
  if (d && d.low) {
    alerts.push(["The ledger's disk has " + gib(d.free_bytes) + " left of " + gib(d.total_bytes) + " (the ledger takes " +
      gib(d.ledger_bytes) + "). When it is full, no sale is recorded or acknowledged: make room.", ""]);
  }
  const st = mode.stats;
  if (st.gate_refused) alerts.push(["The gate refuses this Redis: " + st.gate_refused, ""]);
  if (st.projection_drift) alerts.push(["Redis lost part of the projection " + st.projection_drift + " time(s) (last: " + st.last_drift + ", " + st.last_drift_at + "); each time the store rebuilt it from the ledger.", "warn"]);
  if (st.last_commit_error) {
    alerts.push(["Last ledger commit failure (" + st.commit_errors + " so far, " + st.last_commit_error_at + "): " +
      st.last_commit_error + ". While commits fail nothing is acknowledged; the tills keep their sales.", ""]);
  }
}

function drawDay(totals) {
  if (!chosenDay) $("day").value = totals.business_date;
  const s = totals.store;
  const figs = [
    figure("sales", s.sales),
    figure("takings", yuan(s.amount)),
    figure("refunds", s.refunds),
    figure("refunded", yuan(s.refund_amount)),
  ];
  for (const [method, amount] of Object.entries(s.by_method || {}).sort()) {
    figs.push(figure(method, yuan(amount)));
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

function drawTerminals(view, totals, alerts) {
  const now = Date.parse(view.now);
  const day = new Map(totals.terminals.map((t) => [t.terminal, t]));
  const names = new Set([...view.terminals.map((t) => t.terminal), ...day.keys()]);
  const byName = new Map(view.terminals.map((t) => [t.terminal, t]));
  const rows = [];
  for (const name of [...names].sort()) {
    const t = byName.get(name) || { terminal: name };
    const d = day.get(name);
    let conn = el("td", "unknown", "muted");
    if (t.online === true) conn = el("td", "online", "good");
    if (t.online === false) conn = el("td", "offline since " + ago(t.status_heard, now), "bad");
    const last = t.last_seq ? t.last_kind + " #" + t.last_seq + ", " + ago(t.last_received, now) : "—";
    const hb = t.heartbeat;
    const held = holding(t);
    const backlog = held ? el("td", held.events, "num" + (held.events > 0 ? " warn" : "")) : el("td", "—", "num muted");
    const oldest = held && held.events > 0 ? duration(held.oldestMs) + " (" + ago(held.heard, now) + ")" : "—";
    const catalog = hb ? el("td", "v" + hb.catalog_version, t.catalog_behind || t.catalog_ahead ? "warn" : "") : el("td", "—", "muted");
    const parked = el("td", t.parked || 0, "num" + (t.parked ? " bad" : ""));
    let redis = el("td", "—", "muted");
    let close = el("td", "—", "muted");
    if (d) {
      if (d.redis) redis = d.redis_differs ? el("td", "differs", "bad") : el("td", "matches", "good");
      if (d.declared) close = d.declared_matches ? el("td", "matches", "good") : el("td", "differs", "bad");
    }
    // The till's clock against the store's: the till dates its sales by it (business day).
    // "—" when the store heard nothing to measure it by in the last 5 minutes; "checking"
    // while what it heard says the till is behind but may be messages held on their way.
    const hasClock = t.clock_skew_ms !== undefined && t.clock_skew_ms !== null;
    let clock = hasClock ? el("td", skew(t.clock_skew_ms), t.clock_off ? "bad" : "") : el("td", "—", "muted");
    if (t.clock_unconfirmed) {
      clock = el("td", "checking…", "muted");
      clock.title = "Its messages read behind; the store checks them over " +
        duration(view.clock_behind_confirm_ms) + " before it says so (messages held on the way read behind too). ";
    }
    if (t.clock_checked) clock.title = (clock.title || "") + "Last measured " + storeTime(t.clock_checked) + " (store time).";
    rows.push(row([el("td", name), conn, el("td", last), backlog, el("td", oldest), catalog, parked,
      el("td", d ? d.ledger.sales : 0, "num"), el("td", yuan(d ? d.ledger.amount : "0.00"), "num"), redis, close, clock]));

    if (t.clock_off) {
      const how = t.clock_skew_ms < 0 ? skew(t.clock_skew_ms) : skew(t.clock_skew_ms) + " of";
      alerts.push([name + "'s clock is " + how + " the store's (more than " + duration(view.clock_skew_limit_ms) +
        "): it dates its sales by it, so they can go to the wrong business day. Set the till's date and time.", ""]);
    }

    if (t.online === false && held && held.events > 0) {
      alerts.push([name + " is offline and last reported " + held.events + " unsent events.", "warn"]);
    }
    if (d && d.redis_differs) alerts.push([name + ": Redis counters differ from the ledger for " + totals.business_date + ".", ""]);
    if (d && d.declared && !d.declared_matches) alerts.push([name + ": its day close differs from the ledger.", ""]);
  }
  fill("terminals", rows, "No terminal has connected or sent an event yet.");
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
      const button = el("button", "Count…");
      button.addEventListener("click", () => countShelf(s));
      const action = el("td");
      action.append(button);
      return row([
        el("td", s.sku),
        el("td", s.ledger, "num" + (s.ledger < 0 ? " bad" : "")),
        proven,
        el("td", s.redis === undefined ? "—" : s.redis, "num"),
        el("td", s.redis === undefined ? "—" : s.diff, "num" + (s.diff ? " bad" : "")),
        action,
      ]);
    });
  fill("stock", rows, filter ? "No SKU matches." : "No stock recorded yet.");
  $("proof-at").textContent = proof ? "as of " + proof.at.toLocaleTimeString() : "";
}

// countShelf books what the manager counted on the shelf (whole units). It sends the count,
// not a difference from the stock shown: the table may be seconds old, and the prompt stays
// open while the manager counts, so sales since then are in the shelf already; the ledger
// books the difference from its own stock at that moment. The id makes the count
// idempotent: a retried request is booked once.
async function countShelf(s) {
  const answer = prompt("Counted on the shelf for " + s.sku + " (the ledger says " + s.ledger + "):");
  if (answer === null) return;
  // The ledger books a count of up to 10^12 units (MaxAdjust).
  if (!/^\d{1,13}$/.test(answer.trim()) || Number(answer.trim()) > 1e12) {
    alert("A count is a whole number of units, from 0 to 1000000000000.");
    return;
  }
  const counted = Number(answer.trim());
  // An offline till's sales have left the shelf but not the ledger: booked now, the count
  // takes them off once, and their arrival a second time. So have those an online till is
  // still sending after being offline (its backlog report). A till not heard since the
  // store started (the broker keeps no status across a restart) may be offline too.
  const tills = [];
  if (offlineTills.length > 0) tills.push("Not known to be online: " + offlineTills.join(", ") + ".");
  if (sendingTills.length > 0) tills.push("Still sending sales made offline: " + sendingTills.join(", ") + ".");
  const warning = tills.length > 0 ? "\n\n" + tills.join(" ") +
    " Sales made at a till while offline have left the shelf but not the ledger, and will be taken off " +
    "the stock again when they arrive: count once those tills are online and have sent them." : "";
  if (!confirm("Book " + counted + " × " + s.sku + " counted on the shelf? The ledger will book the difference " +
    "from its own stock at that moment (it said " + s.ledger + " when the table was drawn)." + warning)) return;
  const rnd = new Uint8Array(8);
  crypto.getRandomValues(rnd);
  const id = "count-" + s.sku + "-" + Array.from(rnd, (b) => b.toString(16).padStart(2, "0")).join("");
  try {
    const booked = await api(ACTIONS.countStock, { id: id, sku: s.sku, counted: counted });
    proof = null; // it no longer describes the stock: prove again
    alert(s.sku + ": " + counted + " counted; the ledger " + (booked.delta === 0 ? "agreed and booked nothing" :
      "booked " + (booked.delta > 0 ? "+" : "") + booked.delta) + " and now says " + booked.qty + ".");
  } catch (e) {
    if (e instanceof Unauthorized) return signOut("The token was refused.");
    alert("Not counted: " + e.message);
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
    if (e instanceof Unauthorized) return signOut("The token was refused.");
    alert("Stock could not be proved: " + e.message);
  } finally {
    $("prove").disabled = false;
  }
}

function drawOversells(o) {
  fill("oversells", o.oversells.map((x) => {
    const button = el("button", "Resolve…");
    button.addEventListener("click", () => resolveOversell(x));
    const action = el("td");
    action.append(button);
    return row([x.business_date, x.terminal, x.seq, x.sku, el("td", x.short, "num bad"),
      storeTime(x.at), action]);
  }), "None.");
}

// resolveOversell asks what explained the shortfall and records it. Stock is corrected by
// a shelf count (POST /v1/stock/count), not here.
async function resolveOversell(x) {
  const note = prompt("Oversell of " + x.short + " × " + x.sku + " by " + x.terminal + " #" + x.seq +
    ".\nWhat explained it? (e.g. shelf counted, stock adjusted)");
  if (note === null) return;
  try {
    await api(ACTIONS.resolveOversell, { terminal: x.terminal, seq: x.seq, sku: x.sku, note: note });
  } catch (e) {
    if (e instanceof Unauthorized) return signOut("The token was refused.");
    alert("Not resolved: " + e.message);
  }
  refresh();
}

function drawRefundExceptions(r) {
  fill("refund-exceptions", r.refund_exceptions.map((x) => {
    const button = el("button", "Resolve…");
    button.addEventListener("click", () => resolveRefundException(x));
    const action = el("td");
    action.append(button);
    return row([x.business_date, x.terminal, x.seq, el("td", x.code, "bad"), el("td", x.detail, "wrap"),
      storeTime(x.at), action]);
  }), "None.");
}

// resolveRefundException asks what explained a refund the sale does not cover and records
// it. The refund itself stands in the ledger.
async function resolveRefundException(x) {
  const note = prompt("Refund " + x.terminal + " #" + x.seq + ": " + x.detail +
    ".\nWhat explained it? (e.g. goods checked back in, till keyed the wrong line)");
  if (note === null) return;
  try {
    await api(ACTIONS.resolveRefundException, { terminal: x.terminal, seq: x.seq, hash: x.hash, note: note });
  } catch (e) {
    if (e instanceof Unauthorized) return signOut("The token was refused.");
    alert("Not resolved: " + e.message);
  }
  refresh();
}

// PARKED_SHOWN is how many parked events the table lists, the most recently parked.
const PARKED_SHOWN = 50;

function drawParked(p) {
  const shown = p.parked.filter((x) => !x.resolved).slice(0, PARKED_SHOWN);
  const open = typeof p.open === "number" ? p.open : shown.length;
  $("parked-more").textContent = open > shown.length ? "Showing the " + shown.length +
    " most recently parked of " + open + " open: resolve these to see the others." : "";
  fill("parked", shown.map((x) => {
    const button = el("button", "Resolve…");
    button.addEventListener("click", () => resolveParked(x));
    const action = el("td");
    action.append(button);
    return row([x.business_date, x.terminal, x.seq, x.kind || "—", el("td", x.code, "bad"), el("td", x.message, "wrap"),
      storeTime(x.at), action]);
  }), "None.");
}

// resolveParked asks what explained an event the store refused for good, which the till
// kept (its day close counts it), and records it. The event stays refused.
async function resolveParked(x) {
  // A key can be parked with several contents: the hash's start tells them apart.
  const content = x.hash ? " (content " + x.hash.slice(0, 8) + ")" : "";
  const note = prompt("Parked " + (x.kind || "event") + " " + x.terminal + " #" + x.seq + content + ": " + x.message +
    ".\nWhat explained it? (e.g. sale voided with the customer, entered again at another till)");
  if (note === null) return;
  try {
    await api(ACTIONS.resolveParked, { terminal: x.terminal, seq: x.seq, hash: x.hash, note: note });
  } catch (e) {
    if (e instanceof Unauthorized) return signOut("The token was refused.");
    alert("Not resolved: " + e.message);
  }
  refresh();
}

function drawLimits(l) {
  const lim = l.limits;
  const per = " per " + lim.window_ms + " ms";
  const figs = [
    figure("store" + per, lim.store), figure("terminal" + per, lim.terminal), figure("scans" + per, lim.scan),
    figure("payments" + per, lim.pay), figure("refunds" + per, lim.refund),
    figure("promo", l.promo_percent + "%" + (l.promo_expires_in_ms > 0 ? " for " + duration(l.promo_expires_in_ms) : "")),
  ];
  $("limits").replaceChildren(...figs);
}

function drawHQ(a, now, alerts) {
  if (!a.found) {
    $("hq").replaceChildren(el("span", "No upload to headquarters has run from this store yet (state " + a.state + ").", "muted"));
    return;
  }
  const u = a.upload;
  const days = Object.keys(u.declared || {}).sort().slice(-3);
  const figs = [
    figure("rows waiting for HQ", u.backlog, u.backlog > 0 ? "warn" : "good"),
    figure("last batch HQ acknowledged", u.last_sent_at ? ago(u.last_sent_at, now) : "never"),
    figure("batches sent", u.batches),
    figure("days declared (latest)", days.length ? days.join(", ") : "none"),
  ];
  for (const d of Object.keys(u.declaring_in_parts || {}).sort()) {
    const p = u.declaring_in_parts[d];
    figs.push(figure("declaring " + d + " in parts", p.sent + " of " + p.parts + " sent"));
  }
  if (u.pending) figs.push(figure("pending batch (" + (u.attempts || 0) + " failed sends)", u.pending, u.last_error ? "bad" : ""));
  $("hq").replaceChildren(...figs);
  if (u.last_error) alerts.push(["Upload to headquarters failing: " + u.last_error + ". The rows wait in the ledger.", ""]);
  for (const d of u.too_large_to_declare || []) {
    alerts.push(["Business date " + d + " is left undeclared to headquarters: its declaration would take more than 1,000 parts of one batch each. HQ cannot reconcile it.", ""]);
  }
  const hour = 3600 * 1000;
  if (u.backlog > 0 && !u.last_error && (!u.last_sent_at || now - Date.parse(u.last_sent_at) > hour)) {
    alerts.push([u.backlog + " rows wait for headquarters and nothing has been acknowledged for an hour: is hq-sync upload running?", "warn"]);
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
  if (name === "totals" && chosenDay) return "?date=" + encodeURIComponent(chosenDay);
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
    signOut("The token was refused.");
    return;
  }
  const got = {};
  const alerts = [];
  names.forEach((n, i) => {
    if (results[i].status === "fulfilled") got[n] = results[i].value;
    else if (n !== "limits") alerts.push(["Could not read " + ENDPOINTS[n] + ": " + results[i].reason.message, ""]);
  });
  const draw = (name, fn) => {
    if (!got[name]) return;
    try {
      fn();
    } catch (e) {
      alerts.push(["Could not show " + ENDPOINTS[name] + ": " + e.message, ""]);
    }
  };
  draw("mode", () => {
    drawMode(got.mode, alerts);
    $("store").textContent = "store " + got.mode.store + (got.terminals ? " · catalog v" + got.terminals.catalog_version : "");
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
  draw("refundExceptions", () => drawRefundExceptions(got.refundExceptions));
  draw("parked", () => drawParked(got.parked));
  draw("hq", () => drawHQ(got.hq, got.terminals ? Date.parse(got.terminals.now) : Date.now(), alerts));
  if (got.limits) drawLimits(got.limits);
  else $("limits").replaceChildren(el("span", "Limits live in Redis, which cannot be read now.", "muted"));
  $("alerts").replaceChildren(...alerts.map(([text, cls]) => el("li", text, cls)));
  $("updated").textContent = "updated " + new Date().toLocaleTimeString();
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
  $("backup-status").textContent = "making a backup…";
  $("backup-status").className = "muted";
  try {
    const resp = await fetch("/v1/backup", {
      headers: { Authorization: "Bearer " + sessionStorage.getItem(TOKEN_KEY) },
      cache: "no-store",
    });
    if (resp.status === 401) throw new Unauthorized();
    if (!resp.ok) {
      const problem = await resp.json().catch(() => ({}));
      throw new Error(problem.detail || problem.title || String(resp.status));
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
    $("backup-status").textContent = `${name}: ${blob.size} bytes`;
  } catch (e) {
    if (e instanceof Unauthorized) { signOut("The token was refused."); return; }
    $("backup-status").textContent = "backup failed: " + e.message;
    $("backup-status").className = "bad";
  } finally {
    button.disabled = false;
  }
}

function signIn() {
  $("signin").hidden = true;
  $("board").hidden = false;
  $("signout").hidden = false;
  $("backup").hidden = false;
  refresh();
}

document.addEventListener("DOMContentLoaded", () => {
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
