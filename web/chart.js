// A small time-series line chart on a canvas: a rolling window of (time, value) points per series, a y axis with a
// few round ticks, time labels, and the newest value of each series in the legend. No dependencies.

const PAD = { left: 44, right: 10, top: 8, bottom: 20 };

export class LineChart {
  /**
   * @param {HTMLCanvasElement} canvas
   * @param {{series: {name: string, color: string}[], windowS?: number, format?: (v: number) => string,
   *          min?: number, max?: number, legend?: HTMLElement}} options
   */
  constructor(canvas, options) {
    this.canvas = canvas;
    this.series = options.series.map((s) => ({ ...s, points: [] }));
    this.windowS = options.windowS ?? 600;
    this.format = options.format ?? ((v) => v.toFixed(1));
    this.fixedMin = options.min;
    this.fixedMax = options.max;
    this.legend = options.legend;
    new ResizeObserver(() => this.draw()).observe(canvas);
    this.renderLegend();
  }

  /** Add one point to series `index` at `time` (seconds since the epoch). */
  push(index, time, value) {
    if (value === null || value === undefined || Number.isNaN(value)) return;
    const points = this.series[index].points;
    points.push([time, value]);
    const oldest = time - this.windowS * 2;
    while (points.length && points[0][0] < oldest) points.shift();
    this.canvas.dataset.points = String(this.pointCount());
    this.canvas.dataset.newest = String(Math.max(Number(this.canvas.dataset.newest ?? 0), time));
    this.renderLegend();
    this.draw();
  }

  pointCount() {
    return this.series.reduce((sum, s) => sum + s.points.length, 0);
  }

  renderLegend() {
    if (!this.legend) return;
    this.legend.replaceChildren(...this.series.map((s) => {
      const item = document.createElement("span");
      item.className = "legend-item";
      const swatch = document.createElement("i");
      swatch.style.background = s.color;
      const last = s.points.at(-1);
      item.append(swatch, `${s.name}: ${last ? this.format(last[1]) : "–"}`);
      return item;
    }));
  }

  draw() {
    const canvas = this.canvas;
    const ratio = window.devicePixelRatio || 1;
    const width = canvas.clientWidth;
    const height = canvas.clientHeight;
    if (!width || !height) return;
    if (canvas.width !== Math.round(width * ratio) || canvas.height !== Math.round(height * ratio)) {
      canvas.width = Math.round(width * ratio);
      canvas.height = Math.round(height * ratio);
    }
    const ctx = canvas.getContext("2d");
    ctx.setTransform(ratio, 0, 0, ratio, 0, 0);
    ctx.clearRect(0, 0, width, height);
    const style = getComputedStyle(canvas);
    const ink = style.getPropertyValue("--chart-ink").trim() || "#888";
    const grid = style.getPropertyValue("--chart-grid").trim() || "#ddd";
    ctx.font = "11px system-ui, sans-serif";

    const now = Date.now() / 1000;
    const t0 = now - this.windowS;
    const visible = this.series.flatMap((s) => s.points.filter(([t]) => t >= t0).map(([, v]) => v));
    const [lo, hi] = this.range(visible);
    const plotW = width - PAD.left - PAD.right;
    const plotH = height - PAD.top - PAD.bottom;
    const x = (t) => PAD.left + ((t - t0) / this.windowS) * plotW;
    const y = (v) => PAD.top + plotH - ((v - lo) / (hi - lo)) * plotH;

    ctx.strokeStyle = grid;
    ctx.fillStyle = ink;
    ctx.lineWidth = 1;
    ctx.textAlign = "right";
    ctx.textBaseline = "middle";
    for (const tick of niceTicks(lo, hi, Math.max(2, Math.floor(plotH / 28)))) {
      const py = Math.round(y(tick)) + 0.5;
      ctx.beginPath();
      ctx.moveTo(PAD.left, py);
      ctx.lineTo(width - PAD.right, py);
      ctx.stroke();
      ctx.fillText(this.format(tick), PAD.left - 4, py);
    }
    ctx.textAlign = "center";
    ctx.textBaseline = "top";
    const minutes = this.windowS / 60;
    const step = minutes <= 5 ? 1 : minutes <= 15 ? 2 : 5;
    for (let m = 0; m <= minutes; m += step) {
      const px = x(now - m * 60);
      ctx.fillText(m === 0 ? "now" : `-${m}m`, Math.min(Math.max(px, PAD.left + 8), width - PAD.right - 10),
        height - PAD.bottom + 5);
    }

    if (!visible.length) {
      ctx.fillText("waiting for samples (the engine reports every 10 s while busy)", PAD.left + plotW / 2,
        PAD.top + plotH / 2 - 6);
      return;
    }
    ctx.save();
    ctx.beginPath();
    ctx.rect(PAD.left, PAD.top, plotW, plotH);
    ctx.clip();
    for (const s of this.series) {
      const points = s.points.filter(([t]) => t >= t0 - 60);
      if (!points.length) continue;
      ctx.strokeStyle = s.color;
      ctx.fillStyle = s.color;
      ctx.lineWidth = 2;
      ctx.beginPath();
      points.forEach(([t, v], i) => (i ? ctx.lineTo(x(t), y(v)) : ctx.moveTo(x(t), y(v))));
      ctx.stroke();
      for (const [t, v] of points) {
        ctx.beginPath();
        ctx.arc(x(t), y(v), 2.5, 0, Math.PI * 2);
        ctx.fill();
      }
    }
    ctx.restore();
  }

  range(values) {
    if (!values.length) return [this.fixedMin ?? 0, this.fixedMax ?? 1];
    let lo = this.fixedMin ?? Math.min(0, ...values);
    let hi = this.fixedMax ?? Math.max(...values, lo + 1e-9);
    if (this.fixedMax === undefined) hi = hi + (hi - lo) * 0.1 || lo + 1;
    if (hi <= lo) hi = lo + 1;
    return [lo, hi];
  }
}

/** About `count` round tick values between lo and hi (1, 2 or 5 times a power of ten apart). */
export function niceTicks(lo, hi, count) {
  const raw = (hi - lo) / count;
  const power = 10 ** Math.floor(Math.log10(raw));
  const step = [1, 2, 5, 10].map((m) => m * power).find((s) => s >= raw) ?? raw;
  const ticks = [];
  for (let v = Math.ceil(lo / step) * step; v <= hi + step * 1e-9; v += step) ticks.push(Number(v.toPrecision(12)));
  return ticks;
}
