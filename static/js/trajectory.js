// Draws a session's trajectory (sessions/trajectory.py) with uPlot: what each request sent
// carried, the history it was built from and the provider's figures, compaction marks, and the
// window, budget, the Governor's marks and the soft threshold. A click opens a request sent.

function drawTrajectory(container) {
  const data = JSON.parse(document.getElementById(container.dataset.chart).textContent);
  const flat = (value) => data.seqs.map(() => value);
  const marks = new Set(data.marks);
  const number = (v) => (v == null ? "–" : Math.round(v).toLocaleString("en-US"));
  const line = (label, stroke, dash) => ({ label, stroke, dash, width: 1, points: { show: false }, value: (u, v) => number(v) });
  // The axes and the window line in the page's ink, light or dark (static/css/tokens.css).
  const token = (name) => getComputedStyle(document.documentElement).getPropertyValue(name).trim();
  const ink = token("--ink");
  const grid = { stroke: token("--line"), width: 1 };
  const opts = {
    width: container.clientWidth || 800,
    height: 240,
    scales: { x: { time: false } },
    axes: [
      { label: "message #", stroke: ink, grid, ticks: grid },
      { label: "tokens", size: 70, stroke: ink, grid, ticks: grid, values: (u, ticks) => ticks.map(number) },
    ],
    series: [
      { label: "message #" },
      { label: "sent", stroke: "#0072b2", width: 2, spanGaps: true, value: (u, v) => number(v) },
      { label: "effective history then", stroke: "#56b4e9", width: 1, spanGaps: true, value: (u, v) => number(v) },
      { label: "provider-reported input", stroke: "#e69f00", width: 1.5, spanGaps: true, value: (u, v) => number(v) },
      { label: "provider-reported cached", stroke: "#cc79a7", width: 1.5, spanGaps: true, value: (u, v) => number(v) },
      line("window", ink, [1, 3]),
      line("budget", "#667085", [2, 4]),
      line("high-water mark", "#d55e00", [8, 4]),
      line("low-water mark", "#009e73", [8, 4]),
      line("soft threshold", "#b45309", [3, 3]),
    ],
    hooks: {
      // Compaction marks: a vertical line where each one was made.
      draw: [
        (u) => {
          const { ctx, bbox } = u;
          ctx.save();
          ctx.strokeStyle = "#009e73";
          ctx.lineWidth = 2;
          for (const seq of marks) {
            const x = Math.round(u.valToPos(seq, "x", true));
            ctx.beginPath();
            ctx.moveTo(x, bbox.top);
            ctx.lineTo(x, bbox.top + bbox.height);
            ctx.stroke();
          }
          ctx.restore();
        },
      ],
    },
  };
  container.replaceChildren();
  const columns = [
    data.seqs, data.sent, data.effective, data.reported, data.cached,
    flat(data.window), flat(data.budget), flat(data.high_water), flat(data.low_water), flat(data.threshold),
  ];
  // eslint-disable-next-line no-undef
  const chart = new uPlot(opts, columns, container);
  // A click anywhere opens the request sent nearest the cursor, as it was sent: requests may
  // be far apart (an agent that pulls its context now and then), so the cursor need not hit
  // one.
  chart.over.addEventListener("click", () => {
    if (!container.dataset.requestUrl || chart.cursor.left == null) return;
    let nearest = null;
    let distance = Infinity;
    data.seqs.forEach((seq, i) => {
      if (data.requests[i] == null) return;
      const away = Math.abs(chart.valToPos(seq, "x") - chart.cursor.left);
      if (away < distance) [nearest, distance] = [data.requests[i], away];
    });
    if (nearest != null) {
      window.location.assign(container.dataset.requestUrl.replace("/0/", `/${nearest}/`));
    }
  });
  container.dataset.drawn = "true";
}

// On load, and whenever htmx swaps a new trajectory in.
htmx.onLoad((element) => {
  const containers = element.matches?.("[data-chart]") ? [element] : element.querySelectorAll?.("[data-chart]") ?? [];
  containers.forEach(drawTrajectory);
});
