// Draws a session's trajectory (sessions/trajectory.py) with uPlot: request sizes over the
// session, the provider's figures beside ours, compaction marks, the threshold and the budget.

function drawTrajectory(container) {
  const data = JSON.parse(document.getElementById(container.dataset.chart).textContent);
  const flat = (value) => data.seqs.map(() => value);
  const marks = new Set(data.marks);
  const number = (v) => (v == null ? "–" : Math.round(v).toLocaleString("en-US"));
  const opts = {
    width: container.clientWidth || 800,
    height: 220,
    scales: { x: { time: false } },
    axes: [
      { label: "message #" },
      { label: "tokens", size: 70, values: (u, ticks) => ticks.map(number) },
    ],
    series: [
      { label: "message #" },
      { label: "effective history then", stroke: "#0072b2", width: 1.5, value: (u, v) => number(v) },
      { label: "provider-reported input", stroke: "#e69f00", width: 1.5, spanGaps: true, value: (u, v) => number(v) },
      { label: "soft threshold", stroke: "#d55e00", dash: [6, 4], width: 1, points: { show: false }, value: (u, v) => number(v) },
      { label: "budget", stroke: "#667085", dash: [2, 4], width: 1, points: { show: false }, value: (u, v) => number(v) },
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
  // eslint-disable-next-line no-undef
  new uPlot(opts, [data.seqs, data.effective, data.reported, flat(data.threshold), flat(data.budget)], container);
  container.dataset.drawn = "true";
}

// On load, and whenever htmx swaps a new trajectory in.
htmx.onLoad((element) => {
  const containers = element.matches?.("[data-chart]") ? [element] : element.querySelectorAll?.("[data-chart]") ?? [];
  containers.forEach(drawTrajectory);
});
