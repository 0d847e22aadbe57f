// posgate store dashboard: its words. Every label, alert and message the page shows comes
// from one message catalog per language (i18n/<lang>.json, embedded in the store-server);
// the language is the one the manager picked on the page, else the first of the browser's
// languages the page speaks, else English. Amounts are shown from the API's exact decimal
// text, with the thousands grouped: the text is never turned into a number.
"use strict";

const I18N = (() => {
  const LANGS = ["en", "zh-CN"];
  const KEY = "posgate-lang";
  let lang = "en";
  let messages = {};

  // pick returns the language to show: the one picked on the page, else the first of the
  // browser's languages the page speaks (any Chinese reads Simplified Chinese), else English.
  function pick() {
    const chosen = localStorage.getItem(KEY);
    if (LANGS.includes(chosen)) return chosen;
    for (const l of navigator.languages || [navigator.language || "en"]) {
      const low = String(l).toLowerCase();
      if (low.startsWith("zh")) return "zh-CN";
      if (low.startsWith("en")) return "en";
    }
    return "en";
  }

  async function load(l) {
    const resp = await fetch("/i18n/" + l + ".json", { cache: "no-cache" });
    if (!resp.ok) throw new Error("messages " + l + ": " + resp.status);
    messages = await resp.json();
    lang = l;
    document.documentElement.lang = l;
  }

  // t returns the message key with each {name} replaced by params[name]. A key the catalog
  // lacks shows as itself, so that a gap is seen rather than hidden.
  function t(key, params) {
    let s = Object.prototype.hasOwnProperty.call(messages, key) ? messages[key] : key;
    if (params) {
      for (const [k, v] of Object.entries(params)) s = s.split("{" + k + "}").join(String(v));
    }
    return s;
  }

  // group inserts a thousands separator every three digits of an amount's whole part:
  // "-1234567.80" → "-1,234,567.80". Both languages group by three with "," and mark the
  // decimals with ".".
  function group(text) {
    const m = /^(-?)(\d+)(\.\d+)?$/.exec(String(text));
    if (!m) return String(text);
    return m[1] + m[2].replace(/\B(?=(\d{3})+(?!\d))/g, ",") + (m[3] || "");
  }

  // amount shows an amount in yuan from its decimal text ("—" for none).
  function amount(text) {
    if (text === undefined || text === null) return "—";
    return "¥" + group(text);
  }

  // fen turns an amount's decimal text into a whole number of fen, for a chart's scale: the
  // digits are read as integers, never as a floating-point amount.
  function fen(text) {
    const m = /^(-?)(\d+)(?:\.(\d{1,2}))?$/.exec(String(text));
    if (!m) return null;
    const v = Number(m[2]) * 100 + Number((m[3] || "0").padEnd(2, "0"));
    return m[1] ? -v : v;
  }

  // fenText writes a whole number of fen as yuan with grouping (a chart's axis).
  function fenText(v) {
    const neg = v < 0;
    const a = Math.abs(Math.round(v));
    return "¥" + (neg ? "-" : "") + group(String(Math.trunc(a / 100)) + "." + String(a % 100).padStart(2, "0"));
  }

  // apply translates the page's fixed words: data-i18n (text), data-i18n-placeholder and
  // data-i18n-title.
  function apply(root) {
    for (const e of root.querySelectorAll("[data-i18n]")) e.textContent = t(e.dataset.i18n);
    for (const e of root.querySelectorAll("[data-i18n-placeholder]")) e.placeholder = t(e.dataset.i18nPlaceholder);
    for (const e of root.querySelectorAll("[data-i18n-title]")) e.title = t(e.dataset.i18nTitle);
    document.title = t("title");
  }

  // switcher fills the language select and calls onChange after loading a new choice.
  function switcher(select, onChange) {
    select.replaceChildren();
    for (const l of LANGS) {
      const o = document.createElement("option");
      o.value = l;
      o.textContent = { en: "English", "zh-CN": "简体中文" }[l];
      select.append(o);
    }
    select.value = lang;
    select.addEventListener("change", async () => {
      localStorage.setItem(KEY, select.value);
      await load(select.value);
      onChange();
    });
  }

  return { pick, load, t, amount, group, fen, fenText, apply, switcher, lang: () => lang, LANGS };
})();
