// quota-center console: draws the usage chart with uPlot. Everything else
// is server-rendered HTML refreshed by htmx; no page logic lives here.
(function () {
  "use strict";
  function clock(s) {
    s = Math.round(s);
    var h = Math.floor(s / 3600), m = Math.floor(s / 60) % 60, sec = s % 60;
    return h + ":" + (m < 10 ? "0" : "") + m + ":" + (sec < 10 ? "0" : "") + sec;
  }
  function grouped(v) {
    return Math.round(v).toString().replace(/\B(?=(\d{3})+(?!\d))/g, ",");
  }
  function draw() {
    var el = document.getElementById("usage-chart");
    if (!el || el.dataset.drawn || typeof uPlot === "undefined") {
      return;
    }
    var d = JSON.parse(el.dataset.series);
    el.dataset.drawn = "1";
    if (!d.x.length) {
      el.textContent = "No sessions started in this range.";
      return;
    }
    var fmt = d.unit === "seconds" ? clock : function (v) { return grouped(v) + " " + d.unit; };
    var bars = uPlot.paths && uPlot.paths.bars ? uPlot.paths.bars({ size: [0.4, 30], align: 1 }) : undefined;
    var opts = {
      width: Math.max(320, el.clientWidth || 800), height: 280,
      scales: { x: { time: true, range: [d.from, d.to] }, y: { range: function (u, min, max) { return [0, Math.max(1, max) * 1.1]; } } },
      series: [
        {},
        { label: "granted", stroke: "#4a7bd0", fill: "rgba(74,123,208,0.35)", paths: bars, points: { show: false },
          value: function (u, v) { return v == null ? "—" : fmt(v); } },
        { label: "charged", stroke: "#d0674a", fill: "rgba(208,103,74,0.55)", paths: bars, points: { show: false },
          value: function (u, v) { return v == null ? "—" : fmt(v); } }
      ],
      axes: [{}, { size: 90, values: function (u, vals) { return vals.map(fmt); } }]
    };
    new uPlot(opts, [d.x, d.granted, d.charged], el);
  }
  document.addEventListener("DOMContentLoaded", draw);
  window.addEventListener("load", draw);
})();
