// wolf's report: interactive flame graphs. The server already drew every
// graph as SVG; this script redraws one on zoom (click a frame) and on
// search (highlight the frames whose name contains the text, and say what
// share of the total they hold). It logs to the console only when something
// is wrong, so that a test can treat any console message as a failure.
(function () {
  "use strict";
  var SVGNS = "http://www.w3.org/2000/svg";
  var W = 1200, ROW = 17, CHAR = 6.6, MIN_W = 0.3;

  function fail(msg) {
    console.error("wolf report: " + msg);
  }

  // fit cuts a frame name to the width of its rectangle, as the server does.
  function fit(name, w) {
    var n = Math.floor((w - 6) / CHAR);
    var chars = Array.from(name);
    if (n < 3) return "";
    if (chars.length <= n) return name;
    return chars.slice(0, n - 1).join("") + "\u2026";
  }

  function pct(v, total) {
    return total > 0 ? (100 * v / total).toFixed(1) : "0";
  }

  function svgEl(name, attrs) {
    var e = document.createElementNS(SVGNS, name);
    for (var k in attrs) e.setAttribute(k, attrs[k]);
    return e;
  }

  function Flame(fig) {
    var dataEl = fig.querySelector("script.flame-data");
    var svg = fig.querySelector("svg.flame-svg");
    var input = fig.querySelector("input.flame-search");
    var reset = fig.querySelector("button.flame-reset");
    var status = fig.querySelector(".flame-status");
    if (!dataEl || !svg || !input || !reset || !status) {
      throw new Error("flame graph " + fig.id + " is missing a part");
    }
    var d = JSON.parse(dataEl.textContent);
    var n = d.n.length;
    if (d.v.length !== n || d.x.length !== n || d.d.length !== n || d.h.length !== n) {
      throw new Error("flame graph " + fig.id + ": data columns differ in length");
    }
    var zoom = 0;

    // valueText prints a value in the profile's unit, nanoseconds as time.
    function valueText(v) {
      if (d.unit === "ns") {
        if (v >= 1e9) return (v / 1e9).toFixed(2) + " s";
        if (v >= 1e6) return (v / 1e6).toFixed(1) + " ms";
        if (v >= 1e3) return (v / 1e3).toFixed(1) + " \u00b5s";
      }
      return v + " " + d.unit;
    }
    var matches = null;

    function draw() {
      while (svg.firstChild) svg.removeChild(svg.firstChild);
      if (n === 0) return 0;
      var zx = d.x[zoom], zv = d.v[zoom], zd = d.d[zoom];
      // First what is wide enough to draw, then as tall as its deepest.
      var boxes = [], maxDepth = 0;
      for (var i = 0; i < n; i++) {
        var x0, w, ancestor = false;
        if (d.d[i] >= zd && d.x[i] >= zx && d.x[i] + d.v[i] <= zx + zv) {
          x0 = (d.x[i] - zx) / zv * W;
          w = d.v[i] / zv * W;
        } else if (d.d[i] < zd && d.x[i] <= zx && d.x[i] + d.v[i] >= zx + zv) {
          x0 = 0;
          w = W;
          ancestor = true;
        } else {
          continue;
        }
        if (w < MIN_W) continue;
        boxes.push([i, x0, w, ancestor]);
        maxDepth = Math.max(maxDepth, d.d[i]);
      }
      var H = (maxDepth + 1) * ROW;
      svg.setAttribute("viewBox", "0 0 " + W + " " + H);
      var drawn = 0;
      for (var b = 0; b < boxes.length; b++) {
        var j = boxes[b][0], bx = boxes[b][1], bw = boxes[b][2];
        var y = H - (d.d[j] + 1) * ROW;
        var g = svgEl("g", { "data-i": String(j) });
        if (boxes[b][3]) g.setAttribute("class", "ancestor");
        var title = svgEl("title", {});
        title.textContent = d.n[j] + ": " + valueText(d.v[j]) + " (" + pct(d.v[j], d.total) + "%)";
        g.appendChild(title);
        var rect = svgEl("rect", { x: bx.toFixed(1), y: y, width: bw.toFixed(1), height: ROW - 1, fill: "hsl(" + d.h[j] + ",75%,62%)" });
        if (matches && matches[j]) rect.setAttribute("class", "match");
        g.appendChild(rect);
        var label = fit(d.n[j], bw);
        if (label) {
          var text = svgEl("text", { x: (bx + 3).toFixed(1), y: y + 12 });
          text.textContent = label;
          g.appendChild(text);
        }
        svg.appendChild(g);
        drawn++;
      }
      fig.setAttribute("data-drawn", String(drawn));
      return drawn;
    }

    function search(q) {
      if (!q) {
        matches = null;
        status.textContent = "";
        return;
      }
      q = q.toLowerCase();
      matches = new Array(n);
      // Nodes are depth-first: a match's descendants follow it within
      // [x, x+v), so a match inside a counted one is not counted twice.
      var sum = 0, count = 0, end = -1;
      for (var i = 1; i < n; i++) {
        matches[i] = d.n[i].toLowerCase().indexOf(q) >= 0;
        if (!matches[i]) continue;
        count++;
        if (d.x[i] >= end) {
          sum += d.v[i];
          end = d.x[i] + d.v[i];
        }
      }
      status.textContent = count + " matching frames, " + pct(sum, d.total) + "% of " + valueText(d.total);
      fig.setAttribute("data-matched-pct", pct(sum, d.total));
    }

    svg.addEventListener("click", function (ev) {
      var g = ev.target.closest ? ev.target.closest("g[data-i]") : null;
      if (!g) return;
      var i = parseInt(g.getAttribute("data-i"), 10);
      zoom = (i === zoom) ? 0 : i;
      draw();
    });
    reset.addEventListener("click", function () {
      zoom = 0;
      input.value = "";
      search("");
      draw();
    });
    input.addEventListener("input", function () {
      search(input.value);
      draw();
    });

    if (draw() === 0 && n > 1) {
      throw new Error("flame graph " + fig.id + " drew nothing from " + n + " frames");
    }
    // Zoom and search, exposed for tests and the curious.
    fig.wolfFlame = { zoom: function (i) { zoom = i; return draw(); }, search: function (q) { search(q); return draw(); } };
    fig.setAttribute("data-ready", "1");
  }

  try {
    var figs = document.querySelectorAll("figure[data-flame]");
    var ready = 0;
    for (var i = 0; i < figs.length; i++) {
      try {
        Flame(figs[i]);
        ready++;
      } catch (e) {
        fail(String(e && e.message || e));
      }
    }
    if (ready === figs.length) {
      document.documentElement.setAttribute("data-wolf-js", "ok");
    }
  } catch (e) {
    fail(String(e && e.message || e));
  }
})();
