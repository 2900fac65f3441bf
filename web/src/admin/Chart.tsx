import { useEffect, useRef } from "react";
import uPlot from "uplot";
import "uplot/dist/uPlot.min.css";
import type { Series } from "./model";


// A small time chart on uPlot (about 50 KB minified, canvas-drawn): a
// charting library that costs the bundle little, unlike the SVG-and-D3
// React ones. x is seconds since the epoch.
export function Chart({ title, x, series, width = 360, height = 140 }: { title: string; x: number[]; series: Series[]; width?: number; height?: number }) {
  const el = useRef<HTMLDivElement>(null);
  const plot = useRef<uPlot | null>(null);
  const shape = series.map((s) => s.label).join("|");
  useEffect(() => {
    if (!el.current) return;
    const opts: uPlot.Options = {
      width,
      height,
      legend: { show: true },
      cursor: { drag: { x: false, y: false } },
      scales: { x: { time: true }, y: { range: (_u, min, max) => [0, Math.max(1, max, min)] } },
      axes: [{ size: 28 }, { size: 40 }],
      series: [{}, ...series.map((s) => ({ label: s.label, stroke: s.color, width: 1.5, points: { show: true, size: 4 } }))],
    };
    plot.current = new uPlot(opts, [x, ...series.map((s) => s.values)] as uPlot.AlignedData, el.current);
    return () => {
      plot.current?.destroy();
      plot.current = null;
    };
    // Rebuilt only when the chart's shape changes; data changes setData below.
    // eslint-disable-next-line react-hooks/exhaustive-deps
  }, [shape, width, height]);
  useEffect(() => {
    plot.current?.setData([x, ...series.map((s) => s.values)] as uPlot.AlignedData);
  }, [x, series]);
  return (
    <figure className="chart">
      <figcaption>{title}</figcaption>
      <div ref={el} />
    </figure>
  );
}
