// posgate HQ page: HQ finance's view of the chain, from hq-sync serve's viewer API. Every
// value is put in the page as text (never as HTML); amounts arrive as decimal text in yuan
// and are shown as they are, grouped, never turned into numbers. Every word comes from the
// message catalog of the page's language (/hq/i18n/<lang>.json), picked from the browser's
// languages unless the viewer picked one on the page.
"use strict";

const TOKEN_KEY = "posgate-hq-token";
const LANG_KEY = "posgate-hq-lang";
const LANGS = ["en", "zh-CN"];
const REFRESH_MS = 30000;

const $ = (id) => document.getElementById(id);
let messages = {};
let lang = "en";

function t(key, params) {
  let s = Object.prototype.hasOwnProperty.call(messages, key) ? messages[key] : key;
  for (const [k, v] of Object.entries(params || {})) s = s.split("{" + k + "}").join(String(v));
  return s;
}

function pickLang() {
  const chosen = localStorage.getItem(LANG_KEY);
  if (LANGS.includes(chosen)) return chosen;
  for (const l of navigator.languages || [navigator.language || "en"]) {
    const low = String(l).toLowerCase();
    if (low.startsWith("zh")) return "zh-CN";
    if (low.startsWith("en")) return "en";
  }
  return "en";
}

async function loadLang(l) {
  const resp = await fetch("/hq/i18n/" + l + ".json", { cache: "no-cache" });
  if (!resp.ok) throw new Error(String(resp.status));
  messages = await resp.json();
  lang = l;
  document.documentElement.lang = l;
  for (const e of document.querySelectorAll("[data-i18n]")) e.textContent = t(e.dataset.i18n);
  for (const e of document.querySelectorAll("[data-i18n-placeholder]")) e.placeholder = t(e.dataset.i18nPlaceholder);
  document.title = t("title");
}

// amount shows an amount in yuan from its decimal text, its whole part grouped by three.
function amount(text) {
  if (text === undefined || text === null) return "—";
  const m = /^(-?)(\d+)(\.\d+)?$/.exec(String(text));
  if (!m) return "¥" + text;
  return "¥" + m[1] + m[2].replace(/\B(?=(\d{3})+(?!\d))/g, ",") + (m[3] || "");
}

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

function fill(id, rows) {
  const body = $(id).querySelector("tbody");
  body.replaceChildren(...rows);
  if (rows.length === 0) {
    const td = el("td", t("none"), "muted");
    td.colSpan = $(id).querySelectorAll("th").length;
    body.append(row([td]));
  }
}

function dur(s) {
  if (s < 60) return t("dur.s", { n: s });
  if (s < 3600) return t("dur.min", { n: Math.floor(s / 60) });
  if (s < 86400) return t("dur.h", { n: Math.floor(s / 3600) });
  return t("dur.d", { n: Math.floor(s / 86400) });
}

// when shows a time as HQ's clock wrote it: date and time, without the zone.
function when(iso) {
  if (!iso) return t("never");
  const m = /^(\d{4}-\d{2}-\d{2})T(\d{2}:\d{2}:\d{2})/.exec(iso);
  return m ? m[1] + " " + m[2] : iso;
}

class Unauthorized extends Error {}

async function api(path) {
  const resp = await fetch(path, { headers: { Authorization: "Bearer " + sessionStorage.getItem(TOKEN_KEY) }, cache: "no-store" });
  if (resp.status === 401) throw new Unauthorized();
  const answer = await resp.json();
  if (!resp.ok) {
    const key = "error." + answer.code;
    throw new Error(t(key) !== key ? t(key) : answer.detail || String(resp.status));
  }
  return answer;
}

let chosenDate = null; // a date the viewer picked, or null: the latest a store declared
let timer = null;
let generation = 0;
let drill = null; // {store, date} while the drill-down is open

async function refresh() {
  clearTimeout(timer);
  const mine = ++generation;
  const alerts = [];
  try {
    if (drill) await drawDrill(await api("/v1/view/txns?store=" + encodeURIComponent(drill.store) + "&date=" + drill.date));
    else drawOverview(await api("/v1/view/overview" + (chosenDate ? "?date=" + chosenDate : "")));
  } catch (e) {
    if (e instanceof Unauthorized) return signOut(t("error.refused"));
    alerts.push(t("error.read", { what: drill ? "/v1/view/txns" : "/v1/view/overview", detail: e.message }));
  }
  if (mine !== generation) return;
  $("alerts").replaceChildren(...alerts.map((a) => el("li", a)));
  $("updated").textContent = t("updated", { time: new Date().toLocaleTimeString(lang) });
  document.body.dataset.drawn = String(mine);
  if (!document.hidden) timer = setTimeout(refresh, REFRESH_MS);
}

function drawOverview(o) {
  $("overview").hidden = false;
  $("drill").hidden = true;
  const r = o.reconcile;
  if (!chosenDate && o.date) $("date").value = o.date;
  $("report-title").textContent = o.date ? t("report.title", { date: o.date }) : t("report.none");
  const v = $("verdict");
  if (r) {
    const diffs = r.txns.filter((d) => d.kind !== "late").length + r.totals.length + r.missing.length;
    v.textContent = diffs === 0 ? t("verdict.ok") : t("verdict.notok", { n: diffs });
    v.className = "verdict " + (diffs === 0 ? "good" : "bad");
    const fig = (n, key) => { const d = el("div", t(key)); d.prepend(el("b", n)); return d; };
    $("summary").replaceChildren(fig(r.stores, "summary.stores"), fig(r.terminals, "summary.terminals"),
      fig(r.ledger_txns, "summary.declared"), fig(r.hq_txns, "summary.hq"), fig(r.day_closes, "summary.closes"),
      fig(r.exceptions.length, "summary.exceptions"));
  } else {
    v.textContent = "";
    v.className = "verdict";
    $("summary").replaceChildren();
  }
  fill("stores", o.stores.map((s) => {
    const days = el("td", null, "wrap");
    for (const d of s.days) days.append(el("span", t("day.chip", { date: d.date, rev: d.revision, n: d.txns, amount: amount(d.amount) }), "chip"));
    if (s.days.length === 0) days.append(el("span", t("day.none", { n: o.dates.length }), "muted"));
    const open = el("td");
    if (o.date) {
      const b = el("button", t("txns.open"), "link");
      b.dataset.store = s.store;
      b.addEventListener("click", () => openDrill(s.store, o.date));
      open.append(b);
    }
    return row([el("td", s.store), el("td", s.last_batch_at ? when(s.last_batch_at) : t("never")),
      el("td", s.lag_seconds === undefined ? "—" : dur(s.lag_seconds), s.lag_seconds > 3600 ? "warn" : ""), days,
      el("td", s.differences, "num" + (s.differences ? " bad" : "")), el("td", s.exceptions, "num"),
      el("td", s.open, "num" + (s.open ? " warn" : "")),
      r ? el("td", s.reconciled ? t("yes") : t("no"), s.reconciled ? "good" : "bad") : el("td", "—", "muted"), open]);
  }));
  const money = (a) => (a ? amount(a.amount) : "—");
  // Late rows are not differences: the store declared the day again with them. They are
  // listed apart, folded.
  const late = r ? r.txns.filter((d) => d.kind === "late") : [];
  fill("diffs", r ? r.txns.filter((d) => d.kind !== "late").map((d) => row([el("td", t("kind." + d.kind), "bad"), d.store,
    d.terminal, el("td", d.seq, "num"), el("td", money(d.ledger), "num"), el("td", money(d.hq), "num"),
    el("td", diffDetail(d), "wrap")])).concat(r.missing.map((m) => row([el("td", t("kind." + m.kind), "bad"), m.store,
    m.terminal || "—", "", "", "", ""]))) : []);
  $("late-box").hidden = late.length === 0;
  $("late-summary").textContent = t("late.summary", { n: late.length });
  fill("late", late.map((d) => row([d.store, d.terminal, el("td", d.seq, "num"), el("td", money(d.hq), "num"),
    el("td", diffDetail(d), "wrap")])));
  $("exceptions-title").textContent = t("exceptions.title", { date: o.date || "—" });
  fill("exceptions", r ? r.exceptions.map((x) => row([el("td", t("exkind." + x.kind), "warn"), x.store, x.terminal,
    el("td", x.seq, "num"), x.sku || "", el("td", x.qty_short || "", "num"), el("td", x.detail || "", "wrap"),
    x.resolved ? t("resolved", { note: x.resolution || "" }) : t("open")])) : []);
  fill("open", o.open.map((x) => row([x.business_date, el("td", t("exkind." + x.kind), "warn"), x.store, x.terminal,
    el("td", x.seq, "num"), x.sku || "", el("td", x.qty_short || "", "num"), el("td", x.detail || "", "wrap")])));
}

// diffDetail is a difference's detail: a late row's in the page's words, from its times;
// the others' as reconcile wrote it.
function diffDetail(d) {
  if (d.kind === "late" && d.received_at && d.declared_at) {
    const s = Math.max(0, Math.round((Date.parse(d.received_at) - Date.parse(d.declared_at)) / 1000));
    return t("late.detail", { d: dur(s), at: when(d.declared_at) });
  }
  return d.detail;
}

function openDrill(store, date) {
  drill = { store, date };
  refresh();
}

async function drawDrill(d) {
  $("overview").hidden = true;
  $("drill").hidden = false;
  $("txns-title").textContent = t("txns.title", { store: d.store, date: d.date }) + " · " +
    (d.revision ? t("txns.revision", { rev: d.revision }) : t("txns.undeclared"));
  const bad = d.txns.filter((x) => x.status !== "matches").length;
  $("txns-summary").textContent = t("txns.count", { n: d.txns.length, bad });
  fill("closes", d.day_closes.map((c) => {
    const x = c.totals || {};
    return row([c.terminal, el("td", c.seq, "num"), t("closes.line", { sales: x.sale_count, amount: amount(x.sale_amount),
      refunds: x.refund_count, refunded: amount(x.refund_amount) }), when(c.received_at)]);
  }));
  fill("txns", d.txns.map((x) => row([x.terminal, el("td", x.seq, "num"), t("txnkind." + x.kind), el("td", x.flow_no, "num"),
    el("td", amount(x.declared), "num"), el("td", amount(x.hq), "num"),
    el("td", t("status." + x.status), x.status === "matches" ? "good" : "bad"), x.received_at ? when(x.received_at) : "—"])));
}

function signOut(message) {
  clearTimeout(timer);
  generation++;
  sessionStorage.removeItem(TOKEN_KEY);
  $("board").hidden = true;
  $("signout").hidden = true;
  $("signin").hidden = false;
  $("signin-error").textContent = message || "";
}

function signIn() {
  $("signin").hidden = true;
  $("board").hidden = false;
  $("signout").hidden = false;
  refresh();
}

function langSwitch() {
  const sel = $("lang");
  for (const l of LANGS) {
    const o = el("option", { en: "English", "zh-CN": "简体中文" }[l]);
    o.value = l;
    sel.append(o);
  }
  sel.value = lang;
  sel.addEventListener("change", async () => {
    localStorage.setItem(LANG_KEY, sel.value);
    await loadLang(sel.value);
    if (sessionStorage.getItem(TOKEN_KEY)) refresh();
  });
}

document.addEventListener("DOMContentLoaded", async () => {
  try {
    await loadLang(pickLang());
  } catch (e) {
    await loadLang("en");
  }
  langSwitch();
  $("signin").addEventListener("submit", (ev) => {
    ev.preventDefault();
    sessionStorage.setItem(TOKEN_KEY, $("token").value);
    $("token").value = "";
    signIn();
  });
  $("signout").addEventListener("submit", (ev) => { ev.preventDefault(); signOut(); });
  $("date").addEventListener("change", () => { chosenDate = $("date").value || null; drill = null; refresh(); });
  $("latest").addEventListener("click", () => { chosenDate = null; drill = null; refresh(); });
  $("back").addEventListener("click", () => { drill = null; refresh(); });
  document.addEventListener("visibilitychange", () => {
    if (!document.hidden && sessionStorage.getItem(TOKEN_KEY)) refresh();
    else clearTimeout(timer);
  });
  // The page can be opened as /#token=…: the fragment never reaches the server, and it is
  // taken out of the address bar at once.
  const frag = new URLSearchParams(location.hash.slice(1));
  if (frag.get("token")) {
    sessionStorage.setItem(TOKEN_KEY, frag.get("token"));
    history.replaceState(null, "", location.pathname);
  }
  if (sessionStorage.getItem(TOKEN_KEY)) signIn();
  else signOut();
});
