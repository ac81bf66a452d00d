// figures.js: the live figures of one request (time to first token,
// tokens, tokens/s, gaps between tokens) and the gap chart, an inline SVG.

const SVG = "http://www.w3.org/2000/svg";

// Figures accumulates arrival times. A "token" is an event that carries
// output: a text delta on the OpenAI routes and on Triton text models,
// any response on other Triton models.
class Figures {
  constructor(start) {
    this.start = start; // performance.now() when the request was sent
    this.first = null; // arrival of the first token
    this.last = null;
    this.tokens = 0;
    this.gaps = []; // ms between consecutive tokens
    this.maxGap = null;
  }

  token(at) {
    if (this.first === null) {
      this.first = at;
    } else {
      const gap = at - this.last;
      this.gaps.push(gap);
      this.maxGap = Math.max(this.maxGap ?? 0, gap);
    }
    this.last = at;
    this.tokens++;
  }

  get ttft() { return this.first === null ? null : this.first - this.start; }

  // rate is tokens per second after the first token; null until two.
  get rate() {
    if (this.tokens < 2 || this.last === this.first) return null;
    return (this.tokens - 1) / ((this.last - this.first) / 1000);
  }

  quantile(q) {
    if (this.gaps.length === 0) return null;
    const s = this.gaps.slice().sort((a, b) => a - b);
    return s[Math.min(s.length - 1, Math.floor(q * s.length))];
  }
}

// ms formats a duration for the figures: 0.42 ms, 12.3 ms, 4.56 s.
function ms(v) {
  if (v === null || v === undefined) return "–";
  if (v >= 10000) return (v / 1000).toFixed(1) + " s";
  if (v >= 1000) return (v / 1000).toFixed(2) + " s";
  if (v >= 100) return v.toFixed(0) + " ms";
  if (v >= 10) return v.toFixed(1) + " ms";
  return v.toFixed(2) + " ms";
}

function perSecond(v) {
  if (v === null) return "–";
  return v >= 100 ? v.toFixed(0) : v.toFixed(1);
}

// drawGaps draws gaps as bars, oldest on the left, into svg: one bar per
// gap while they fit, else the largest gap of each column, so a burst is
// never averaged away. The dashed line is the median.
function drawGaps(svg, figures, median) {
  const gaps = figures.gaps;
  const width = Math.max(60, Math.round(svg.clientWidth || 300));
  const height = 48;
  svg.setAttribute("viewBox", `0 0 ${width} ${height}`);
  svg.replaceChildren();
  if (gaps.length === 0) return;
  const top = 1.15 * figures.maxGap || 1; // headroom: even gaps are not a solid block
  const columns = Math.min(gaps.length, width);
  const per = gaps.length / columns;
  const bar = width / columns;
  let d = "";
  for (let c = 0; c < columns; c++) {
    let v = 0;
    for (let i = Math.floor(c * per); i < Math.floor((c + 1) * per); i++) v = Math.max(v, gaps[i]);
    const h = Math.max(1, (v / top) * (height - 2));
    const x = c * bar;
    const w = Math.max(0.6, bar - (bar > 3 ? 1 : 0));
    d += `M${x.toFixed(2)} ${height}h${w.toFixed(2)}v${(-h).toFixed(2)}h${(-w).toFixed(2)}z`;
  }
  const path = document.createElementNS(SVG, "path");
  path.setAttribute("class", "bars");
  path.setAttribute("d", d);
  const y = height - Math.max(1, (median / top) * (height - 2));
  const line = document.createElementNS(SVG, "line");
  line.setAttribute("class", "median");
  line.setAttribute("x1", "0");
  line.setAttribute("x2", String(width));
  line.setAttribute("y1", y.toFixed(2));
  line.setAttribute("y2", y.toFixed(2));
  const title = document.createElementNS(SVG, "title");
  title.textContent = `${gaps.length} gaps between tokens; the longest ${ms(figures.maxGap)}, the dashed line the median ${ms(median)}`;
  svg.append(title, path, line);
}
