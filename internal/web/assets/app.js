// lockd dashboard: keeps relative times current between refreshes.
//
// Every <time data-clock data-ms> the server renders says how many ms were
// left ("left") or had passed ("ago", "for") when it rendered. We note when
// each element first appears and count from there, so the browser's clock
// never has to agree with Redis's. Without JavaScript the server's text
// stays as rendered, which is still correct at load time.
(function () {
  "use strict";

  var seen = new WeakMap();

  // span formats like the server's span(): "12 s", "3 min 4 s", "2 h",
  // "3 d 4 h"; leaseSpan, for time left, counts ms under a second.
  function pair(big, bigUnit, small, smallUnit) {
    return small === 0 ? big + " " + bigUnit : big + " " + bigUnit + " " + small + " " + smallUnit;
  }
  function leaseSpan(ms) {
    return ms < 1000 ? Math.max(0, Math.floor(ms)) + " ms" : span(ms);
  }
  function span(ms) {
    var s = Math.max(0, Math.floor(ms / 1000));
    if (s < 60) return s + " s";
    if (s < 3600) return pair(Math.floor(s / 60), "min", s % 60, "s");
    if (s < 86400) return pair(Math.floor(s / 3600), "h", Math.floor((s % 3600) / 60), "min");
    return pair(Math.floor(s / 86400), "d", Math.floor((s % 86400) / 3600), "h");
  }

  function tick() {
    var now = performance.now();
    var els = document.querySelectorAll("time[data-clock]");
    for (var i = 0; i < els.length; i++) {
      var el = els[i];
      var mode = el.getAttribute("data-clock");
      var ms = parseInt(el.getAttribute("data-ms"), 10);
      if (!mode || isNaN(ms)) continue;
      if (!seen.has(el)) seen.set(el, now);
      var passed = now - seen.get(el);
      var text;
      if (mode === "left") {
        // Never says expired: this page only knows what the server said at its
        // last refresh, and a short lease is renewed many times in between
        // (a 900 ms lease every 300 ms). The next refresh has the truth.
        text = leaseSpan(ms - passed) + " left";
      } else if (mode === "ago") {
        text = span(ms + passed) + " ago";
      } else {
        text = span(ms + passed);
      }
      if (el.textContent !== text) el.textContent = text;
    }
  }

  // A failed refresh leaves the old table in place; say so, and clear the
  // note once a refresh works again.
  function refreshFailed(failed) {
    var notes = document.querySelectorAll("[data-refresh-error]");
    for (var i = 0; i < notes.length; i++) notes[i].hidden = !failed;
  }

  // Live updates: the page's [data-live] element names its event stream;
  // each change there makes htmx re-fetch the table or the detail
  // (hx-trigger "lockdchange from:body"). EventSource reconnects by itself,
  // sending the last event's id, so nothing is missed across a blip.
  function live() {
    var el = document.querySelector("[data-live]");
    if (!el || !window.EventSource || !window.htmx) return;
    var es = new EventSource(el.getAttribute("data-live"));
    es.addEventListener("change", function () { window.htmx.trigger(document.body, "lockdchange"); });
  }

  document.addEventListener("DOMContentLoaded", tick);
  document.addEventListener("DOMContentLoaded", live);
  document.addEventListener("htmx:afterSettle", function () { tick(); refreshFailed(false); });
  document.addEventListener("htmx:responseError", function () { refreshFailed(true); });
  document.addEventListener("htmx:sendError", function () { refreshFailed(true); });
  // Sub-second values change fast; a quarter second keeps them honest.
  setInterval(tick, 250);
})();
