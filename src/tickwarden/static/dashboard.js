/* tickwarden dashboard: relative/local times and uPlot charts, on load and after every htmx swap.
 *
 * <time datetime="…Z"> elements arrive with UTC text; they are rewritten relative to the
 * server's clock (the nearest [data-now]), with the local and UTC times in the title, so a
 * simulated clock reads correctly. Elements marked [data-chart] hold a JSON spec in a
 * <script type="application/json"> child and become a uPlot chart; a chart with "links"
 * opens the run under the cursor on click.
 */
(function () {
  "use strict";
  var UNITS = [["year", 31536000], ["month", 2592000], ["week", 604800], ["day", 86400],
               ["hour", 3600], ["minute", 60], ["second", 1]];
  var rtf = window.Intl && Intl.RelativeTimeFormat ? new Intl.RelativeTimeFormat(undefined, {numeric: "auto"}) : null;

  function serverNow(el) {
    var holder = el.closest("[data-now]");
    var parsed = holder ? Date.parse(holder.getAttribute("data-now")) : NaN;
    return isNaN(parsed) ? Date.now() : parsed;
  }

  function relative(ms) {
    var seconds = Math.round(ms / 1000);
    for (var i = 0; i < UNITS.length; i++) {
      var unit = UNITS[i];
      if (Math.abs(seconds) >= unit[1] || unit[0] === "second") {
        var n = Math.round(seconds / unit[1]);
        if (rtf) { return rtf.format(n, unit[0]); }
        return n < 0 ? (-n) + " " + unit[0] + "s ago" : "in " + n + " " + unit[0] + "s";
      }
    }
    return "";
  }

  function times(root) {
    root.querySelectorAll("time[datetime]").forEach(function (el) {
      var at = Date.parse(el.getAttribute("datetime"));
      if (isNaN(at)) { return; }
      if (!el.dataset.utc) { el.dataset.utc = el.getAttribute("title") || el.textContent; }
      var local = new Date(at).toLocaleString(undefined, {dateStyle: "medium", timeStyle: "medium"});
      var style = el.dataset.style;
      if (style === "local") {
        el.textContent = local;
      } else if (style === "short") {
        el.textContent = new Date(at).toLocaleString(undefined, {month: "short", day: "numeric", hour: "2-digit", minute: "2-digit"});
      } else {
        el.textContent = relative(at - serverNow(el));
      }
      el.title = local + " (local) · " + el.dataset.utc;
      el.classList.add("js-time");
    });
  }

  function chart(el) {
    if (typeof window.uPlot !== "function") { return; }
    var source = el.querySelector('script[type="application/json"]');
    if (!source) { return; }
    var spec = JSON.parse(source.textContent);
    el.querySelectorAll(".uplot").forEach(function (old) { old.remove(); });
    var bars = spec.kind === "bars";
    var series = [{}];
    var data = [spec.x];
    spec.series.forEach(function (s, i) {
      var options = {label: s.label, stroke: s.color, width: 0, fill: bars ? s.color + "cc" : undefined};
      if (bars) {
        // Two series side by side in each bucket: the first left of the bucket's start, the second right.
        options.paths = uPlot.paths.bars({size: [0.45, 40], align: spec.series.length > 1 ? (i === 0 ? -1 : 1) : 0});
        options.points = {show: false};
      } else {
        options.points = {show: true, size: 7, fill: s.color, stroke: s.color};
        options.paths = function () { return null; };
      }
      series.push(options);
      data.push(s.values);
    });
    var width = Math.max(240, el.clientWidth - 16);
    var plot = new uPlot({
      width: width, height: 220, series: series,
      // Bars sit either side of their bucket's middle: pad the axis by half a bucket so the edges show whole.
      scales: {x: {time: true, range: function (u, min, max) {
                 var half = bars && spec.x.length > 1 ? (spec.x[1] - spec.x[0]) / 2 : 0;
                 return [min - half, max + half];
               }}, y: {range: function (u, min, max) { return [0, Math.max(1, max * 1.1)]; }}},
      // Counts are whole numbers: no 0.5 gridlines.
      axes: [{}, bars ? {label: "count", size: 60, incrs: [1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 5000, 10000],
                         values: function (u, ticks) { return ticks.map(function (v) { return String(Math.round(v)); }); }}
                      : {label: "seconds", size: 60}],
      cursor: {points: {size: 9}},
    }, data, el);
    if (spec.links) {
      plot.over.style.cursor = "pointer";
      plot.over.addEventListener("click", function () {
        var idx = plot.cursor.idx;
        if (idx != null && spec.links[idx]) { window.location.href = spec.links[idx]; }
      });
    }
  }

  function init(root) {
    times(root);
    root.querySelectorAll("[data-chart]").forEach(chart);
  }

  document.addEventListener("DOMContentLoaded", function () {
    init(document);
    document.body.addEventListener("htmx:afterSettle", function (event) { init(event.detail.elt || document); });
  });
})();
