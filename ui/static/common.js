// Shared by every page: the API client (with the access token), formatting, small DOM helpers.
"use strict";

const Elastune = (() => {
  const TOKEN_KEY = "elastune-ui-token";

  // A token in the URL fragment (#token=...) is taken once and removed: fragments never reach the server.
  (function tokenFromFragment() {
    const m = location.hash.match(/(?:^#|&)token=([^&]+)/);
    if (m) {
      sessionStorage.setItem(TOKEN_KEY, decodeURIComponent(m[1]));
      history.replaceState(null, "", location.pathname + location.search);
    }
  })();

  class ApiError extends Error {
    constructor(status, body) {
      super((body && body.detail) || `The server answered ${status}`);
      this.status = status;
      this.problems = (body && body.problems) || [];
    }
  }

  // The token stays in this tab's sessionStorage, never in localStorage: that would outlive the tab, on
  // disk, readable by any page served at this origin later (127.0.0.1:PORT is whatever listens there
  // next, another local user's server included). A new tab asks this UI's open tabs for it instead (a
  // BroadcastChannel reaches this origin's pages in this browser only) and the user only when none has
  // one: a tab shares a token only once the server has taken it, and only while it is open.
  const CHANNEL = "elastune-ui-token";
  let accepted = null; // the token the server last took from this tab
  const answering = "BroadcastChannel" in window ? new BroadcastChannel(CHANNEL) : null;
  if (answering) {
    answering.onmessage = (event) => {
      const token = sessionStorage.getItem(TOKEN_KEY);
      if (event.data === "token?" && token && token === accepted) answering.postMessage({ token });
    };
  }
  let sharing = null;
  function tokenFromOpenTabs() {
    if (!answering) return Promise.resolve(null);
    if (sharing) return sharing;
    sharing = new Promise((resolve) => {
      const ask = new BroadcastChannel(CHANNEL); // its own message reaches the tab's other channel, not it
      const done = (token) => { clearTimeout(timer); ask.close(); sharing = null; resolve(token); };
      const timer = setTimeout(() => done(null), 500); // an open tab answers within milliseconds
      ask.onmessage = (event) => { if (event.data && typeof event.data.token === "string") done(event.data.token); };
      ask.postMessage("token?");
    });
    return sharing;
  }

  let asking = null;
  function askToken(wrong) {
    if (asking) return asking;
    const dialog = document.getElementById("token-dialog");
    const err = document.getElementById("token-error");
    err.hidden = !wrong;
    err.textContent = wrong ? "That token was not accepted. Check it and try again." : "";
    asking = new Promise((resolve) => {
      document.getElementById("token-form").onsubmit = () => {
        sessionStorage.setItem(TOKEN_KEY, document.getElementById("token-input").value.trim());
        asking = null;
        resolve();
      };
      dialog.showModal();
    });
    return asking;
  }

  async function request(method, path, body, accept) {
    for (let attempt = 0; attempt < 4; attempt++) {
      const headers = { Accept: accept || "application/json" };
      const token = sessionStorage.getItem(TOKEN_KEY);
      if (token) headers.Authorization = `Bearer ${token}`;
      if (body !== undefined) headers["Content-Type"] = "application/json";
      let res;
      try {
        res = await fetch(path, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) });
      } catch (e) {
        throw new ApiError(0, { detail: "The UI server cannot be reached. Is `elastune ui` still running?" });
      }
      if (res.status === 401) {
        const shared = token ? null : await tokenFromOpenTabs(); // a token this tab tried is asked of the user
        if (shared) sessionStorage.setItem(TOKEN_KEY, shared);
        else await askToken(Boolean(token));
        continue;
      }
      if (token) accepted = token;
      const type = res.headers.get("content-type") || "";
      const payload = type.includes("json") ? await res.json() : await res.text();
      if (!res.ok) throw new ApiError(res.status, typeof payload === "string" ? { detail: payload } : payload);
      return payload;
    }
    throw new ApiError(401, { detail: "No valid access token was given." });
  }

  const api = {
    get: (path) => request("GET", path),
    post: (path, body) => request("POST", path, body === undefined ? {} : body),
    text: (path) => request("GET", path, undefined, "*/*"),
  };

  // Save text as a file: downloads go through the API client so the token is sent.
  async function download(path, filename, type) {
    const text = await api.text(path);
    const url = URL.createObjectURL(new Blob([text], { type }));
    const a = el("a", { href: url, download: filename });
    document.body.append(a); a.click(); a.remove();
    setTimeout(() => URL.revokeObjectURL(url), 1000);
  }

  function el(tag, attrs, ...children) {
    const node = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v === null || v === undefined || v === false) continue;
      if (k === "class") node.className = v;
      else if (k.startsWith("on")) node.addEventListener(k.slice(2), v);
      else if (k === "text") node.textContent = v;
      else node.setAttribute(k, v === true ? "" : v);
    }
    for (const c of children.flat()) if (c !== null && c !== undefined && c !== false) node.append(c);
    return node;
  }

  function bytes(n) {
    if (n === null || n === undefined) return "–";
    const units = ["B", "KiB", "MiB", "GiB", "TiB"];
    let v = Number(n), i = 0;
    while (Math.abs(v) >= 1024 && i < units.length - 1) { v /= 1024; i++; }
    return i === 0 ? `${v.toFixed(0)} B` : `${v.toFixed(v >= 100 ? 0 : v >= 10 ? 1 : 2)} ${units[i]}`;
  }
  const gib = (n) => (n === null || n === undefined ? null : n / 2 ** 30);
  function rate(n) { return n === null || n === undefined ? "–" : `${Math.round(n).toLocaleString("en-US")}`; }
  function num(n, digits = 4) { return n === null || n === undefined ? "–" : Number(n).toFixed(digits); }
  function when(seconds) {
    if (!seconds) return "–";
    const d = new Date(seconds * 1000);
    const today = new Date().toDateString() === d.toDateString();
    return today ? d.toLocaleTimeString([], { hour: "2-digit", minute: "2-digit", second: "2-digit" })
      : d.toLocaleString([], { year: "numeric", month: "short", day: "numeric", hour: "2-digit", minute: "2-digit" });
  }
  function duration(start, end) {
    if (!start) return "–";
    let s = Math.max(0, Math.round((end || Date.now() / 1000) - start));
    const h = Math.floor(s / 3600), m = Math.floor((s % 3600) / 60); s %= 60;
    return h ? `${h} h ${m} min` : m ? `${m} min ${s} s` : `${s} s`;
  }
  const STATUS_WORDS = {
    PENDING: "waiting", RUNNING: "running", SUCCEEDED: "succeeded", FAILED: "failed", STOPPED: "stopped",
    ok: "ok", infeasible: "infeasible", oom: "out of memory", pruned: "stopped early", failed: "failed",
    running: "running", finished: "finished", interrupted: "interrupted", stale: "stale (driver gone)",
  };
  // Plain text with each command-line option (`--cluster-address`, `--ray-address='…'`) and each
  // address (`ray://HOST:10001`) in a <code> that does not wrap: a hint never breaks "--" from its name.
  const CODE_RE = /((?<![\w-])--[A-Za-z][\w-]*(?:=(?:'[^']*'|"[^"]*"|[^\s,;)]+))?|\b[a-z][a-z0-9+.-]*:\/\/[^\s'",;()]*[^\s'",;().])/;
  function withCode(text) {
    return String(text).split(CODE_RE).map((part, i) => (i % 2 ? el("code", { class: "opt", text: part }) : part)).filter((p) => p !== "");
  }
  const pill = (status, extra) => el("span", { class: `pill ${status} ${extra || ""}`, text: STATUS_WORDS[status] || status });
  function empty(title, text) { return el("div", { class: "empty" }, el("strong", { text: title }), text ? el("div", {}, withCode(text)) : null); }

  function banner(message, kind) {
    const node = document.getElementById("banner");
    if (!message) { node.hidden = true; return; }
    node.replaceChildren(...withCode(message));
    node.className = `banner ${kind || ""}`;
    node.hidden = false;
  }

  // Poll `fn` every `ms` while the tab is visible; errors go to the banner and polling goes on.
  function poll(fn, ms) {
    let timer = null;
    const tick = async () => {
      try { await fn(); banner(null); } catch (e) { banner(e.message); }
      timer = setTimeout(tick, document.hidden ? ms * 4 : ms);
    };
    tick();
    return () => clearTimeout(timer);
  }

  return { api, ApiError, download, el, bytes, gib, rate, num, when, duration, pill, empty, banner, poll, withCode, STATUS_WORDS };
})();
